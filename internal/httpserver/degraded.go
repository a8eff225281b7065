package httpserver

// Degraded is what a readiness check returns when its dependency answers
// but with a limitation that does not make the process unready (RabbitMQ
// blocking publishers during an alarm): /readyz shows the text for the
// check and still answers 200. Keep it a fixed word, not an error's detail.
type Degraded string

func (d Degraded) Error() string { return string(d) }
