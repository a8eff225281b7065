package config

import (
	"fmt"

	"github.com/hookrelay/hookrelay/internal/rule"
)

// RuleLimits are the bounds of one evaluation of a route's expressions.
func (c *Config) RuleLimits() rule.Limits {
	return rule.Limits{Cost: c.Rules.CostLimit, OutputBytes: c.Rules.MaxOutputBytes, Timeout: c.Rules.Timeout}
}

// CheckRouteRules compiles r's filter and transformation and returns what
// does not compile, each problem with its key (prefix.filter, ...) and its
// line and column. A run-time route is checked by the same function when it
// is made or changed.
func CheckRouteRules(prefix string, r Route, l rule.Limits) []string {
	var problems []string
	if prefix != "" {
		prefix += "."
	}
	if r.OnDead != "" && r.Ordering != OrderingFIFO {
		problems = append(problems, fmt.Sprintf("%son_dead: only a route with ordering fifo has it (ordering is %q)", prefix, r.Ordering))
	}
	if r.Filter != "" {
		if _, err := rule.CompileFilter(r.Filter, l); err != nil {
			problems = append(problems, fmt.Sprintf("%sfilter: %v", prefix, err))
		}
	}
	if r.Transform != "" || r.TransformHeaders != "" {
		if r.Transform != "" {
			if _, err := rule.CompileTransform(r.Transform, "", l); err != nil {
				problems = append(problems, fmt.Sprintf("%stransform: %v", prefix, err))
			}
		}
		if r.TransformHeaders != "" {
			if _, err := rule.CompileTransform("", r.TransformHeaders, l); err != nil {
				problems = append(problems, fmt.Sprintf("%stransform_headers: %v", prefix, err))
			}
		}
	}
	return problems
}

func checkRules(cfg *Config) []string {
	var problems []string
	for i, r := range cfg.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			key = fmt.Sprintf("routes[%s]", r.Name)
		}
		problems = append(problems, CheckRouteRules(key, r, cfg.RuleLimits())...)
	}
	return problems
}
