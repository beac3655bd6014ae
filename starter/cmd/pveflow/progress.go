package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pveflow/pveflow/starter"
)

// progressLine shows how a waiting workflow gets on. On a terminal it is one line, rewritten
// in place; anywhere else (a log, a pipe) it writes a line each time the workflow moves on.
type progressLine struct {
	w io.Writer
	// width is the terminal's width; 0 when w is not a terminal.
	width int
	// last is the last line written without its elapsed time, which changes on every tick.
	last  string
	shown bool
}

// show writes p, unless the workflow has not said where it is yet: a run whose first task has
// not run, or whose status predates its first phase, has nothing to show but its age.
func (l *progressLine) show(p starter.Progress, now time.Time) {
	if p.Phase == "" && p.Step == "" {
		return
	}
	parts := []string{p.Phase, p.Step, now.Sub(p.StartedAt).Truncate(time.Second).String()}
	key := p.Phase + " · " + p.Step
	if wait := waitText(p); wait != "" {
		parts = append(parts, wait)
		key += " · " + wait
	}
	line := strings.Join(parts, " · ")
	if l.width > 0 {
		// A line that wraps could no longer be rewritten with a carriage return.
		fmt.Fprintf(l.w, "\r%s\x1b[K", clip(line, l.width-1))
		l.shown = true
		return
	}
	if key != l.last {
		fmt.Fprintln(l.w, line)
		l.last = key
	}
}

// clear removes the line from a terminal, so that what follows starts on a clean line.
func (l *progressLine) clear() {
	if l.shown {
		fmt.Fprint(l.w, "\r\x1b[K")
	}
}

// waitText tells how the pending activity's attempts go, such as "attempt 5 (clone task
// UPID:... still running on node pve1 (for 12s))"; it is empty while the first attempt runs.
func waitText(p starter.Progress) string {
	if p.ActivityAttempt <= 1 && p.LastFailure == "" {
		return ""
	}
	if p.LastFailure == "" {
		return fmt.Sprintf("attempt %d", p.ActivityAttempt)
	}
	return fmt.Sprintf("attempt %d (%s)", p.ActivityAttempt, p.LastFailure)
}

// clip shortens s to at most n runes, marking the cut with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 1 {
		return s
	}
	return string(r[:n-1]) + "…"
}
