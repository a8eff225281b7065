// Package require is a stand-in for testify's.
package require

import (
	"time"

	"github.com/stretchr/testify/assert"
)

type TestingT interface {
	Errorf(format string, args ...any)
	FailNow()
}

func Equal(t TestingT, expected, actual any, msgAndArgs ...any) {}
func NoError(t TestingT, err error, msgAndArgs ...any)          {}
func Error(t TestingT, err error, msgAndArgs ...any)            {}

func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {}
func EventuallyWithT(t TestingT, condition func(*assert.CollectT), waitFor, tick time.Duration, msgAndArgs ...any) {
}
func Never(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {}

type Assertions struct{ t TestingT }

func New(t TestingT) *Assertions                           { return &Assertions{t} }
func (a *Assertions) NoError(err error, msgAndArgs ...any) {}
func (a *Assertions) Eventually(condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
}
