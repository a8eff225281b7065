// Package assert is a stand-in for testify's, with the shapes the analyzer
// looks at: a TestingT first parameter, CollectT and the polling waits.
package assert

import "time"

type TestingT interface {
	Errorf(format string, args ...any)
}

type CollectT struct{ failed bool }

func (c *CollectT) Errorf(format string, args ...any) { c.failed = true }
func (c *CollectT) FailNow()                          { c.failed = true }

func Equal(t TestingT, expected, actual any, msgAndArgs ...any) bool { return true }
func NoError(t TestingT, err error, msgAndArgs ...any) bool          { return true }
func ObjectsAreEqual(expected, actual any) bool                      { return true }

func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	return true
}
func EventuallyWithT(t TestingT, condition func(*CollectT), waitFor, tick time.Duration, msgAndArgs ...any) bool {
	return true
}
func Never(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	return true
}
