package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/fleet"
	"github.com/pveflow/pveflow/workflows/reads"
)

// keepSource is the kept set as gc's flags give it: UIDs, files of UIDs and commands that print
// UIDs, read when the source is asked, just before the run starts.
type keepSource struct {
	uids, files, commands []string
}

func (k keepSource) empty() bool { return len(k.uids)+len(k.files)+len(k.commands) == 0 }

// read is the union of the UIDs of every source. A file or a command's output holds one UID a
// line; blank lines and lines starting with '#' are left out.
func (k keepSource) read(ctx context.Context) ([]string, error) {
	uids := append([]string(nil), k.uids...)
	for _, f := range k.files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, usageError{fmt.Errorf("--keep-file: %w", err)}
		}
		uids = append(uids, uidLines(data)...)
	}
	for _, command := range k.commands {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("--keep-command %q: %w: %s", command, err, strings.TrimSpace(stderr.String()))
		}
		uids = append(uids, uidLines(out)...)
	}
	return uids, nil
}

func uidLines(data []byte) []string {
	var uids []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			uids = append(uids, line)
		}
	}
	return uids
}

// errGarbageLeft is gc's error when a deletion or a pool's reconcile failed, after the result
// is printed.
var errGarbageLeft = errors.New("collect garbage: a deletion or an address pool's reconcile failed (see DETAIL)")

func (c *cli) gcCommand() *cobra.Command {
	var keep keepSource
	var all, dryRun bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "gc (--keep UID | --keep-file F | --keep-command CMD)... | --all [--dry-run] [--grace D]",
		Short: "Delete the VMs with pveflow's mark whose UID is not kept, and the orphan seed ISOs and disks",
		Long: `Deletes the VMs with pveflow's mark whose UID is not kept, each through a delete request to the
entity of its UID, and the seed ISOs that no VM refers to and whose UID no VM carries (a VM
whose config cannot be read keeps every seed ISO). --keep, --keep-file (one UID a line,
# comments) and --keep-command (run with sh -c, prints one UID a line) repeat, and add up; the
kept set is read just before the run. An empty kept set is refused: --all keeps none. --dry-run
lists what would be deleted. Nothing younger than --grace is taken; a UID whose create runs, or
that was created or changed again since the run began, is skipped.
Disks of pveflow's VMID range that no VM has (vm-<vmid>-disk-N, left by a failed clone) are
deleted too, and a VM still locked by a clone task that is gone is listed with the command that
unlocks it: PVE lets no API token clear a lock (docs/proxmox.md).
Every address pool is reconciled with the VMs' marks: an allocation a VM holds that the pool
lost is restored (one the pool gives another proxy meanwhile is listed as a conflict), and one
older than --grace of a proxy with no VM, not kept, whose entity does not run, is freed.
Exits 1 when a deletion or a reconcile failed, after printing what became of each.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case all && !keep.empty():
				return usageError{errors.New("gc: --all keeps no proxy: give it without --keep, --keep-file and --keep-command")}
			case !all && keep.empty():
				return usageError{errors.New("gc: give the proxies to keep (--keep, --keep-file, --keep-command), or --all to keep none")}
			case grace <= 0:
				return usageError{fmt.Errorf("gc: --grace %s: want a positive duration", grace)}
			}
			for _, uid := range keep.uids {
				if err := proxy.ValidateUID(uid); err != nil {
					return usageError{fmt.Errorf("gc: --keep: %w", err)}
				}
			}
			opts := starter.GCOptions{KeepNone: all, DryRun: dryRun, Grace: grace}
			if !all {
				opts.Keep = keep.read
			}
			return c.gc(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&keep.uids, "keep", nil, "keep the proxy of this `UID`; repeats")
	f.StringArrayVar(&keep.files, "keep-file", nil, "keep the proxies of the UIDs in file `F`, one a line; repeats")
	f.StringArrayVar(&keep.commands, "keep-command", nil, "keep the proxies of the UIDs that command `CMD` prints, one a line; repeats")
	f.BoolVar(&all, "all", false, "keep no proxy: collect every VM with pveflow's mark")
	f.BoolVar(&dryRun, "dry-run", false, "list what would be deleted, and delete nothing")
	f.DurationVar(&grace, "grace", reads.DefaultGrace, "leave alone what is younger than `D`")
	return cmd
}

func (c *cli) gc(ctx context.Context, opts starter.GCOptions) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	res, err := awaitWorkflow(ctx, c, "collect garbage", func(ctx context.Context) (fleet.CollectGarbageResult, error) {
		return c.starter.CollectGarbage(ctx, opts)
	})
	if errors.Is(err, starter.ErrEmptyKeep) {
		return fmt.Errorf("gc: %w; give --all to collect every proxy on purpose", err)
	}
	if err != nil {
		return err
	}
	if len(res.Unreadable) > 0 {
		c.say("pveflow: left alone VMs whose config could not be read (see the worker's log): %v", res.Unreadable)
	}
	if err := c.printGarbage(res); err != nil {
		return err
	}
	if res.Failed() {
		return errGarbageLeft
	}
	return nil
}

func (c *cli) printGarbage(res fleet.CollectGarbageResult) error {
	if c.json {
		return c.printJSON(res)
	}
	addresses := addressRows(res)
	if len(res.VMs)+len(res.ISOs)+len(res.Disks)+len(addresses) == 0 {
		fmt.Fprintln(c.stdout, "no garbage found")
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tID\tNODE\tUID\tOUTCOME\tDETAIL")
		for _, v := range res.VMs {
			fmt.Fprintf(tw, "vm\t%s\t%s\t%s\t%s\t%s\n", proxy.FormatProviderID(v.VMID, v.Name), v.Node, orDash(v.UID), v.Outcome, orDash(v.Detail))
		}
		for _, iso := range res.ISOs {
			fmt.Fprintf(tw, "iso\t%s\t%s\t-\t%s\t%s\n", iso.VolID, iso.Node, iso.Outcome, orDash(iso.Detail))
		}
		for _, d := range res.Disks {
			fmt.Fprintf(tw, "disk\t%s\t%s\t-\t%s\t%s\n", d.VolID, d.Node, d.Outcome, orDash(d.Detail))
		}
		for _, row := range addresses {
			fmt.Fprintln(tw, row)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if young := youngLine(res); young != "" {
		if _, err := fmt.Fprintln(c.stdout, young); err != nil {
			return err
		}
	}
	for _, u := range res.UnlistedStorages {
		if _, err := fmt.Fprintf(c.stdout, "not listed: %s\n", u); err != nil {
			return err
		}
	}
	return c.printCloneLocks(res.CloneLocks)
}

// printCloneLocks lists pveflow's VMs with "lock: clone", after a blank line: a stale one with
// the command that clears it, which an API token cannot run; nothing when there is none.
func (c *cli) printCloneLocks(locks []reads.CloneLock) error {
	if len(locks) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLONE LOCK\tNODE\tUID\tSTALE\tWITHOUT A CLONE TASK\tRUN ON THE NODE\tDETAIL")
	for _, l := range locks {
		stale, age := "no", "-"
		if l.Stale {
			stale = "yes"
			age = "unknown"
			if l.Age > 0 {
				age = "at least " + l.Age.Round(time.Second).String()
			}
		}
		fmt.Fprintf(tw, "VM %d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.VMID, l.Node, orDash(l.UID), stale, age, orDash(l.Command), orDash(l.Detail))
	}
	return tw.Flush()
}

// addressRows are the table's rows of what the run did, or would do, in the address pools:
// "address  egress:192.0.2.10/24,2001:db8::10/64  -  <uid>  restored  -", and a pool whose
// reconcile failed.
func addressRows(res fleet.CollectGarbageResult) []string {
	outcome := func(done, planned string) string {
		if res.DryRun {
			return planned
		}
		return done
	}
	row := func(pool string, a activities.AddressHolding, outcome, detail string) string {
		return fmt.Sprintf("address\t%s:%s\t-\t%s\t%s\t%s", pool, addressList(a), a.UID, outcome, orDash(detail))
	}
	var rows []string
	for _, p := range res.Pools {
		for _, a := range p.Restored {
			rows = append(rows, row(p.Pool, a, outcome("restored", "to restore"), "a VM holds it by its mark"))
		}
		for _, a := range p.Freed {
			rows = append(rows, row(p.Pool, a, outcome("freed", "to free"), "no VM holds it"))
		}
		for _, c := range p.Conflicts {
			rows = append(rows, row(p.Pool, c.Held, "conflict",
				fmt.Sprintf("a VM holds it by its mark; the pool gives %s to %s", addressList(c.Allocation), c.Allocation.UID)))
		}
		for _, k := range p.Kept {
			rows = append(rows, row(p.Pool, k.AddressHolding, "kept", k.Detail))
		}
		if p.Error != "" {
			rows = append(rows, fmt.Sprintf("pool\t%s\t-\t-\t%s\t%s", p.Pool, reads.GarbageFailed, p.Error))
		}
	}
	return rows
}

// addressList is "ipv4,ipv6", or the one a holding has.
func addressList(a activities.AddressHolding) string {
	return strings.Join(slices.DeleteFunc([]string{a.IPv4, a.IPv6}, func(s string) bool { return s == "" }), ",")
}

// youngLine says what the grace period hid: "2 items younger than the 1h0m0s grace were left:
// VM 124973 (proxy-x, 5m0s old), local:iso/proxy-y-seed.iso on pve1 (10m0s old)".
func youngLine(res fleet.CollectGarbageResult) string {
	var items []string
	for _, v := range res.YoungVMs {
		items = append(items, fmt.Sprintf("VM %d (%s, %s old)", v.VMID, v.Name, v.Age.Round(time.Second)))
	}
	for _, iso := range res.YoungISOs {
		items = append(items, fmt.Sprintf("%s on %s (%s old)", iso.VolID, iso.Node, iso.Age.Round(time.Second)))
	}
	for _, d := range res.YoungDisks {
		items = append(items, fmt.Sprintf("%s on %s (%s old)", d.VolID, d.Node, d.Age.Round(time.Second)))
	}
	switch len(items) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("1 item younger than the %s grace was left: %s", res.Grace, items[0])
	}
	return fmt.Sprintf("%d items younger than the %s grace were left: %s", len(items), res.Grace, strings.Join(items, ", "))
}
