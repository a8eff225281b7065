//go:build race

package offgoroutine_test

var buildFlags = []string{"-race"}
