package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/buildinfo"
	"github.com/pveflow/pveflow/starter"
)

func (c *cli) waitCommand() *cobra.Command {
	var ref starter.WaitRef
	var del, change, retryNow, pause, resume bool
	var reason string
	cmd := &cobra.Command{
		Use:   "wait --uid UID [--delete | --change] [--activity-id ID] (--retry-now | --pause [--reason R] | --resume)",
		Short: "Act on the wait the operation of a UID is in: retry it now, pause or resume it",
		Long: `Acts on the wait the create (or, with --delete, the delete; with --change, the change) of UID
is in, with Temporal's activity operations, also with no worker running: --retry-now polls
again now with its attempts back at one; --pause stops its polls until --resume.
--activity-id names the activity when several are pending. --retry-now when nothing waits
(the operation has ended, or is between two steps) says that the wait has ended and exits 0:
nothing is held back. A wait that needs more time than its budget fails the run Transient, and
a new create resumes on the same VM (see docs/operations.md).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUID(cmd, ref.UID); err != nil {
				return err
			}
			if del && change {
				return usageError{errors.New("wait: give one of --delete, --change")}
			}
			ref.Op = opOf(del)
			if change {
				ref.Op = starter.Change
			}
			actions := 0
			for _, set := range []bool{retryNow, pause, resume} {
				if set {
					actions++
				}
			}
			switch {
			case actions != 1:
				return usageError{errors.New("wait: give one of --retry-now, --pause, --resume")}
			case reason != "" && !pause:
				return usageError{errors.New("wait: --reason goes with --pause")}
			}
			return c.wait(cmd.Context(), ref, func(ctx context.Context) (starter.Wait, error) {
				switch {
				case retryNow:
					w, err := c.starter.RetryWait(ctx, ref)
					if ref.ActivityID == "" && errors.Is(err, starter.ErrNoPendingWait) {
						// What --retry-now asks for, that nothing waits, holds already. A named
						// activity that is not pending stays an error: the name is wrong.
						return starter.Wait{}, nil
					}
					return w, err
				case pause:
					return c.starter.PauseWait(ctx, ref, reason)
				}
				return c.starter.ResumeWait(ctx, ref)
			})
		},
	}
	f := cmd.Flags()
	proxyOpFlags(cmd, &ref.UID, &del)
	f.BoolVar(&change, "change", false, "the proxy's change rather than its create")
	f.StringVar(&ref.ActivityID, "activity-id", "", "the pending activity's `ID`, when several are pending")
	f.BoolVar(&retryNow, "retry-now", false, "poll again now, with the attempts back at one")
	f.BoolVar(&pause, "pause", false, "stop the polls until --resume")
	f.StringVar(&reason, "reason", "", "the reason `R` the wait is paused, for whoever looks at it")
	f.BoolVar(&resume, "resume", false, "resume the polls of a paused wait")
	return cmd
}

// wait acts on the pending wait of a proxy's workflow with act, and prints the wait.
func (c *cli) wait(ctx context.Context, ref starter.WaitRef, act func(context.Context) (starter.Wait, error)) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	w, err := act(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(w)
	}
	if w.ActivityID == "" {
		_, err := fmt.Fprintf(c.stdout, "the wait of the %s of proxy %s has ended\n", ref.Op, ref.UID)
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "wait  %s\n", waitLine(w))
	return err
}

// waitLine describes a pending activity: "TaskStatus (activity 12) scheduled, attempt 3,
// budget 10m0s, next try at 12:01:02".
func waitLine(w starter.Wait) string {
	line := fmt.Sprintf("%s (activity %s) %s, attempt %d", w.ActivityType, w.ActivityID, w.ActivityState, w.ActivityAttempt)
	if w.Budget > 0 {
		line += fmt.Sprintf(", budget %s", w.Budget)
	}
	if !w.NextAttempt.IsZero() {
		line += fmt.Sprintf(", next try at %s", w.NextAttempt.Local().Format(time.TimeOnly))
	}
	return line
}

func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "pveflow's module version, build and Temporal SDK version",
		Args:  noArgs,
		RunE:  func(*cobra.Command, []string) error { return c.version() },
	}
}

// version prints pveflow's module version and build, and the Temporal SDK it was built with.
func (c *cli) version() error {
	v, ok := buildinfo.Read()
	if !ok {
		return errors.New("version: this binary carries no build information")
	}
	if c.json {
		return c.printJSON(v)
	}
	return v.Write(c.stdout, "pveflow")
}
