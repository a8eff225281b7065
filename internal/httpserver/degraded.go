package httpserver

// Degraded is what a readiness check returns when its dependency answers
// with a limitation that does not make the process unready, because taking
// it out of a load balancer would not help (RabbitMQ blocking publishers
// during an alarm is broker-wide): /readyz still answers 200, shows State,
// a short fixed word chosen by the check (such as "blocked"), instead of
// "ok", and logs Err.
type Degraded struct {
	State string
	Err   error
}

func (e *Degraded) Error() string { return e.State + ": " + e.Err.Error() }
func (e *Degraded) Unwrap() error { return e.Err }
