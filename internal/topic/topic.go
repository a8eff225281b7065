// Package topic is the grammar of AMQP topic binding patterns, in Go: which
// patterns are usable and which routing keys a pattern matches, the way a
// RabbitMQ topic exchange decides. It imports only the standard library, so
// packages that route events without talking to the broker (routeset, and
// through it ops) need no AMQP client.
package topic

import (
	"errors"
	"fmt"
	"strings"
)

// Match reports whether a topic exchange would route key to a binding
// with pattern: words split on '.', '*' matches exactly one word, '#' zero
// or more.
func Match(pattern, key string) bool {
	return matchWords(strings.Split(pattern, "."), strings.Split(key, "."))
}

func matchWords(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			// Collapse runs of '#', then try every split point.
			for len(p) > 1 && p[1] == "#" {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for i := 0; i <= len(k); i++ {
				if matchWords(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || k[0] != p[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}

// PatternError says why s is not a usable topic binding pattern: words
// separated by dots, each either "*", "#" or a non-empty word without
// wildcards, 255 bytes at most. It returns nil for a usable pattern.
func PatternError(s string) error {
	if s == "" {
		return errors.New("empty pattern")
	}
	if len(s) > 255 {
		return errors.New("longer than 255 bytes")
	}
	for i, w := range strings.Split(s, ".") {
		switch {
		case w == "":
			return fmt.Errorf("word %d is empty", i+1)
		case w == "*" || w == "#":
		case strings.ContainsAny(w, "*#"):
			return fmt.Errorf("word %q mixes a wildcard with text; a wildcard must be a whole word", w)
		}
	}
	return nil
}
