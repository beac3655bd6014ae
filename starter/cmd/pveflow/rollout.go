package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/fleet"
)

func (c *cli) rolloutCommand() *cobra.Command {
	var opts starter.RolloutOptions
	cmd := &cobra.Command{
		Use:   "rollout [--image I] [--machine-type M] --max-unavailable N (--selector Q | --uid UID...)",
		Short: "Change the image or machine type of many proxies, N at a time, pausing on the first failure",
		Long: `Starts a Rollout workflow that changes the proxies of the UIDs given with --uid (which repeats),
or of the running, present Proxy entities that the Temporal visibility filter --selector
matches (such as "PveNode = 'pve1'"), in order, at most --max-unavailable at a time: each
change closes once its proxy has its IPv4 again. Follows it on stderr until it ends, or until
it pauses on the first change that fails; then it says how to resume it, and exits 1. The
rollout goes on when pveflow stops following it: 'pveflow rollout status --id ID' says where
it is.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case opts.MaxUnavailable < 1:
				return usageError{fmt.Errorf("rollout: --max-unavailable %d: want at least 1", opts.MaxUnavailable)}
			case opts.Image == "" && opts.MachineType == "":
				return usageError{errors.New("rollout: give --image, --machine-type or both")}
			case (len(opts.UIDs) == 0) == (opts.Selector == ""):
				return usageError{errors.New("rollout: give the proxies with --selector or with --uid, one of them")}
			}
			for _, uid := range opts.UIDs {
				if err := proxy.ValidateUID(uid); err != nil {
					return usageError{fmt.Errorf("rollout: --uid: %w", err)}
				}
			}
			return c.rollout(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Image, "image", "", "the new `IMAGE`: a template of the configuration")
	f.StringVar(&opts.MachineType, "machine-type", "", "the new machine `TYPE` of the configuration")
	f.IntVar(&opts.MaxUnavailable, "max-unavailable", 0, "change at most `N` proxies at a time (required)")
	f.StringVar(&opts.Selector, "selector", "", "change the running, present proxies that visibility filter `Q` matches")
	f.StringArrayVar(&opts.UIDs, "uid", nil, "change the proxy of this `UID`; repeats")
	cmd.AddCommand(c.rolloutStatusCommand(), c.rolloutResumeCommand())
	return cmd
}

func (c *cli) rolloutStatusCommand() *cobra.Command {
	return c.rolloutIDCommand("status --id ID", "Where a rollout is: the proxies done, changing and pending, and why it paused",
		func(ctx context.Context, id string) error {
			st, err := c.starter.RolloutStatus(ctx, id)
			if err != nil {
				return err
			}
			return c.printRollout(id, st)
		})
}

func (c *cli) rolloutResumeCommand() *cobra.Command {
	return c.rolloutIDCommand("resume --id ID", "Resume a paused rollout: make the failed changes again, go on, and follow it",
		func(ctx context.Context, id string) error {
			if _, err := c.starter.ResumeRollout(ctx, id); err != nil {
				return err
			}
			c.say("pveflow: rollout %s resumed", id)
			return c.followRollout(ctx, id)
		})
}

// rolloutIDCommand is a subcommand of rollout that acts, connected, on the rollout --id names.
func (c *cli) rolloutIDCommand(use, short string, act func(ctx context.Context, id string) error) *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRolloutID(cmd, id); err != nil {
				return err
			}
			closeConn, err := c.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			return act(cmd.Context(), id)
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "the rollout's workflow `ID`, as rollout printed it (required)")
	return cmd
}

// checkRolloutID requires --id.
func checkRolloutID(cmd *cobra.Command, id string) error {
	if id == "" {
		return usageError{fmt.Errorf("rollout %s: --id is required", cmd.Name())}
	}
	return nil
}

func (c *cli) rollout(ctx context.Context, opts starter.RolloutOptions) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	id, err := c.starter.Rollout(ctx, opts)
	if err != nil {
		return err
	}
	c.say("pveflow: rollout %s started", id)
	return c.followRollout(ctx, id)
}

// rolloutPaused is the error of a rollout that paused, after its status is printed.
type rolloutPaused struct {
	id      string
	failure fleet.RolloutFailure
}

func (e rolloutPaused) Error() string {
	return fmt.Sprintf("rollout %s paused: %s; resume it with 'pveflow rollout resume --id %s'", e.id, e.failure.Error, e.id)
}

// followRollout shows how the rollout id gets on, a line on stderr each time it moves, until it
// ends or pauses, and prints its status; it says so when no live worker polls its task queue.
func (c *cli) followRollout(ctx context.Context, id string) error {
	type outcome struct {
		st  fleet.RolloutStatus
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		st, err := c.starter.RolloutResult(ctx, id)
		done <- outcome{st, err}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	note := noWorkerNote{what: "rollout " + id, line: &progressLine{w: c.stderr}, start: time.Now()}
	for {
		qctx, cancel := context.WithTimeout(ctx, progressTimeout)
		w, err := c.starter.WorkflowWorkers(qctx, id)
		if err == nil {
			note.judge(w)
		}
		// A status that cannot be had now (no live worker to answer) is asked again at the next
		// tick.
		var st fleet.RolloutStatus
		if err == nil && w.Live() {
			st, err = c.starter.RolloutStatus(qctx, id)
		}
		cancel()
		if err == nil && w.Live() {
			if line := rolloutLine(st); line != last {
				c.say("%s", line)
				last = line
			}
			if st.Paused {
				if err := c.printRollout(id, st); err != nil {
					return err
				}
				return rolloutPaused{id: id, failure: st.Failures[0]}
			}
		}
		select {
		case o := <-done:
			if ctx.Err() != nil {
				return fmt.Errorf("stopped following; rollout %s goes on: follow it with 'pveflow rollout status --id %s'", id, id)
			}
			if o.err != nil {
				return o.err
			}
			return c.printRollout(id, o.st)
		case <-tick.C:
		}
	}
}

// rolloutLine is one line of how a rollout gets on: "3 of 10 changed · 2 changing (a, b) · 5
// pending", after "paused · " while it is paused.
func rolloutLine(st fleet.RolloutStatus) string {
	if st.Paused {
		return "paused · " + rolloutCounts(st)
	}
	return rolloutCounts(st)
}

// rolloutCounts says how many proxies of a rollout are done, changing (which) and pending.
func rolloutCounts(st fleet.RolloutStatus) string {
	changing := fmt.Sprintf("%d changing", len(st.InFlight))
	if len(st.InFlight) > 0 {
		changing += " (" + strings.Join(st.InFlight, ", ") + ")"
	}
	return fmt.Sprintf("%d of %d changed · %s · %d pending", len(st.Done), st.Total, changing, len(st.Pending))
}

// printRollout prints the status of rollout id: the proxies changed, and why it paused.
func (c *cli) printRollout(id string, st fleet.RolloutStatus) error {
	if c.json {
		return c.printJSON(struct {
			ID string `json:"id"`
			fleet.RolloutStatus
		}{id, st})
	}
	state := "running"
	switch {
	case st.Paused:
		state = "paused"
	case len(st.InFlight)+len(st.Pending) == 0:
		state = "done"
	}
	fmt.Fprintf(c.stdout, "rollout %s %s: %s\n", id, state, rolloutCounts(st))
	if len(st.Done) > 0 {
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "UID\tVMID\tNODE\tIPV4\tRESTARTED\tCHANGED")
		for _, d := range st.Done {
			restarted := "no"
			switch {
			case d.Rebuilt:
				restarted = "rebuilt"
			case d.Restarted:
				restarted = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", d.UID, d.VMID, d.Node, cmp.Or(d.IPv4, "-"), restarted, cmp.Or(strings.Join(d.Changed, ", "), "-"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, f := range st.Failures {
		fmt.Fprintf(c.stdout, "failed %s at %s: %s\n", f.UID, f.At.Local().Format(time.DateTime), f.Error)
	}
	return nil
}
