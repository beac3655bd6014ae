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
// not run, or whose status predates its first phase, has nothing to show but its age. A failed
// attempt comes first, so that a terminal shows its cause however long the step; the cause's
// context, which a terminal could not show, is only in a line per change.
func (l *progressLine) show(p starter.Progress, now time.Time) {
	if p.Phase == "" && p.Step == "" {
		return
	}
	wait := waitText(p, l.width == 0)
	var parts []string
	for _, part := range []string{wait, p.Phase, p.Step} {
		if part != "" {
			parts = append(parts, part)
		}
	}
	key := strings.Join(parts, " · ")
	line := key + " · " + now.Sub(p.StartedAt).Truncate(time.Second).String()
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

// note writes a line of its own, which the progress line, if shown, then continues below.
func (l *progressLine) note(s string) {
	if l.shown {
		fmt.Fprint(l.w, "\r\x1b[K")
	}
	fmt.Fprintln(l.w, s)
}

// clear removes the line from a terminal, so that what follows starts on a clean line.
func (l *progressLine) clear() {
	if l.shown {
		fmt.Fprint(l.w, "\r\x1b[K")
	}
}

// waitText tells how the pending activity's attempts go, such as "attempt 5: connection
// refused": the last failure's cause, its last part, and, withContext, what it was the cause
// of: "attempt 5: connection refused (list cluster resources: Get ...: dial tcp ...: connect)".
// It is empty while the first attempt runs.
func waitText(p starter.Progress, withContext bool) string {
	if p.ActivityAttempt <= 1 && p.LastFailure == "" {
		return ""
	}
	if p.LastFailure == "" {
		return fmt.Sprintf("attempt %d", p.ActivityAttempt)
	}
	i := strings.LastIndex(p.LastFailure, ": ")
	switch {
	case i < 0:
		return fmt.Sprintf("attempt %d: %s", p.ActivityAttempt, p.LastFailure)
	case !withContext:
		return fmt.Sprintf("attempt %d: %s", p.ActivityAttempt, p.LastFailure[i+2:])
	}
	return fmt.Sprintf("attempt %d: %s (%s)", p.ActivityAttempt, p.LastFailure[i+2:], p.LastFailure[:i])
}

// clip shortens s to at most n runes, marking the cut with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 1 {
		return s
	}
	return string(r[:n-1]) + "…"
}
