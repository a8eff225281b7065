package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far a long operation (replay, retry, requeue, purge)
// is, on stderr: a bar while a person watches a terminal, otherwise a line
// every progressEvery (the first at once), which a log or CI keeps.
type progress struct {
	name, unit string
	w          io.Writer
	terminal   bool
	bar        *progressbar.ProgressBar
	last       time.Time
}

// progress starts the progress of the operation name, counting unit
// ("event(s) scanned").
func (c *cli) progress(name, unit string) *progress {
	return &progress{name: name, unit: unit, w: c.errOut, terminal: c.errTerminal}
}

// update says done of total units are through, with detail (counts of
// what happened to them).
func (p *progress) update(done, total int64, detail string) {
	if !p.terminal {
		if !p.last.IsZero() && time.Since(p.last) < progressEvery {
			return
		}
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s: %d of %d %s, %s\n", p.name, done, total, p.unit, detail)
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(max(total, 1),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.name),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString(p.unit),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	p.bar.ChangeMax64(max(total, 1))
	p.bar.Describe(p.name + " (" + p.unit + "): " + detail)
	_ = p.bar.Set64(done) // writes to a terminal; nothing to do if it fails
}

// done ends the progress: the bar is cleared, so that the command's own
// lines follow on a clean terminal.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Exit()
		fmt.Fprint(p.w, "\r\033[K")
	}
}
