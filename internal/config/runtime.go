package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
)

// RouteDefaults fills what a route made at run time leaves out, as a
// route of config.yaml gets them: timeout 10s, concurrency 1, burst 1, the
// circuit's 10 failures and 30s cool-down, and one attempt per retry tier
// plus the first.
func (c *Config) RouteDefaults(r *Route) {
	if r.Timeout == 0 {
		r.Timeout = 10 * time.Second
	}
	if r.Concurrency == 0 {
		r.Concurrency = 1
	}
	if r.Burst == 0 {
		r.Burst = 1
	}
	if r.Circuit.Cooldown == 0 {
		r.Circuit.Cooldown = 30 * time.Second
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = len(c.Retry.Backoff) + 1
	}
}

// CheckRoute checks a route made or changed at run time by the rules a
// route of config.yaml follows (its signing secrets aside: the relay makes
// them). The error lists every problem, each starting with the setting's
// key (url, bindings[0], headers.X-Token, ...), and repeats no value that
// may carry a credential.
func (c *Config) CheckRoute(r Route) error {
	var problems []string
	named := r
	if team, short, ok := strings.Cut(r.Name, ":"); ok {
		// A team's route, TEAM:NAME (ops checks that TEAM is its team):
		// each part a name. A route of config.yaml never has the colon.
		named.Name = short
		if !identRe.MatchString(team) {
			problems = append(problems, fmt.Sprintf("name: %q: a team's route is named TEAM:NAME, each a-z 0-9 _ - (1-63, starting with a letter or digit)", r.Name))
		}
	}
	err := newValidator().Struct(named)
	var verrs validator.ValidationErrors
	if errors.As(err, &verrs) {
		for _, fe := range verrs {
			key := fieldKey(fe)
			if strings.HasPrefix(key, "signing_secret") {
				continue
			}
			problems = append(problems, key+": "+fieldProblem(fe))
		}
	} else if err != nil {
		problems = append(problems, err.Error())
	}
	problems = append(problems, checkRouteHeaders("headers", r.Headers)...)
	problems = append(problems, CheckRouteRules("", r, c.RuleLimits())...)
	problems = append(problems, CheckRouteKind("", r, c.AMQP.Prefix)...)
	if p := rateProblem(r); p != "" {
		problems = append(problems, "rate_limit: "+p)
	}
	if p := c.holdProblem(r); p != "" {
		problems = append(problems, "timeout: "+p)
	}
	for _, d := range c.Routes {
		if d.Name == r.Name {
			problems = append(problems, fmt.Sprintf("name: %q is a route of config.yaml", r.Name))
		}
	}
	if len(problems) > 0 {
		return &RouteError{Problems: problems}
	}
	return nil
}

// RouteError lists why a route made at run time is refused.
type RouteError struct{ Problems []string }

func (e *RouteError) Error() string { return strings.Join(e.Problems, "; ") }
