package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/pveflow/pveflow/starter"
)

// wait acts on the pending wait of a proxy's workflow with Temporal's activity operations.
func (c *cli) wait(ctx context.Context, args []string) error {
	fs := c.flagSet("wait")
	var ref starter.WaitRef
	fs.StringVar(&ref.UID, "uid", "", "")
	fs.StringVar(&ref.ActivityID, "activity-id", "", "")
	del := fs.Bool("delete", false, "")
	retryNow := fs.Bool("retry-now", false, "")
	pause := fs.Bool("pause", false, "")
	reason := fs.String("reason", "", "")
	resume := fs.Bool("resume", false, "")
	if err := parseWithUID(fs, args, &ref.UID); err != nil {
		return err
	}
	ref.Op = starter.Create
	if *del {
		ref.Op = starter.Delete
	}
	actions := 0
	for _, set := range []bool{*retryNow, *pause, *resume} {
		if set {
			actions++
		}
	}
	switch {
	case actions != 1:
		return usageError{errors.New("wait: give one of --retry-now, --pause, --resume")}
	case *reason != "" && !*pause:
		return usageError{errors.New("wait: --reason goes with --pause")}
	}
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	var w starter.Wait
	switch {
	case *retryNow:
		w, err = c.starter.RetryWait(ctx, ref)
	case *pause:
		w, err = c.starter.PauseWait(ctx, ref, *reason)
	default:
		w, err = c.starter.ResumeWait(ctx, ref)
	}
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
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "wait\t%s\n", waitLine(w))
	return tw.Flush()
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

// version prints pveflow's module version and build, and the Temporal SDK it was built with.
func (c *cli) version(args []string) error {
	fs := c.flagSet("version")
	if err := parse(fs, args); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("version: this binary carries no build information")
	}
	v := versionInfo{Module: info.Main.Path, Version: info.Main.Version, GoVersion: info.GoVersion}
	for _, dep := range info.Deps {
		if dep.Path == "go.temporal.io/sdk" {
			v.TemporalSDK = dep.Version
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if c.json {
		return c.printJSON(v)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pveflow\t%s %s\n", v.Module, v.Version)
	if v.Revision != "" {
		modified := ""
		if v.Modified {
			modified = " (modified)"
		}
		fmt.Fprintf(tw, "revision\t%s %s%s\n", v.Revision, v.RevisionTime, modified)
	}
	fmt.Fprintf(tw, "go\t%s\n", v.GoVersion)
	fmt.Fprintf(tw, "temporal sdk\t%s\n", v.TemporalSDK)
	return tw.Flush()
}

// versionInfo is what `pveflow version` prints.
type versionInfo struct {
	Module       string `json:"module"`
	Version      string `json:"version"`
	Revision     string `json:"revision,omitempty"`
	RevisionTime string `json:"revisionTime,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
	GoVersion    string `json:"goVersion"`
	TemporalSDK  string `json:"temporalSDK"`
}
