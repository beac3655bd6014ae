package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/starter"
	"github.com/pveflow/pveflow/workflows/proxyvm"
	"github.com/pveflow/pveflow/workflows/reads"
)

// The read commands: get, ls and check. Each runs a short read workflow.

func (c *cli) getCommand() *cobra.Command {
	var uid, providerID string
	cmd := &cobra.Command{
		Use:   "get (--uid UID | --provider-id vms/<vmid>/<name>)",
		Short: "What the proxy's VM is doing: Running (with its addresses), Provisioning or Stopped",
		Long: `Finds the VM of a proxy and says what it is doing: Running (with its addresses), Provisioning
(running, no routable address yet) or Stopped, with its provider ID, node, VMID, UID and creation time
from its mark. It runs the GetProxy workflow, which only reads: it needs no create to have
run, and runs beside a create or delete of the same proxy.

Exits 7 when there is no such VM (absent, its VMID now another VM's, or not marked as the
proxy's), 4 when the VM is locked, being cloned or of unknown status (ask again later), 3 on
bad input or when two VMs carry the proxy's mark.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case (uid == "") == (providerID == ""):
				return usageError{errors.New("get: give one of --uid and --provider-id")}
			case uid != "":
				if err := proxy.ValidateUID(uid); err != nil {
					return usageError{fmt.Errorf("get: --uid: %w", err)}
				}
			default:
				if _, _, err := proxy.ParseProviderID(providerID); err != nil {
					return usageError{fmt.Errorf("get: --provider-id: %w", err)}
				}
			}
			return c.get(cmd.Context(), uid+providerID)
		},
	}
	cmd.Flags().StringVar(&uid, "uid", "", "the proxy's `UID`")
	cmd.Flags().StringVar(&providerID, "provider-id", "", "the proxy's provider `ID`, vms/<vmid>/<name>")
	return cmd
}

func (c *cli) get(ctx context.Context, key string) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	res, err := awaitWorkflow(ctx, c, "get proxy "+key, func(ctx context.Context) (proxyvm.GetProxyResult, error) {
		return c.starter.GetProxy(ctx, key)
	})
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(res)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "proxy\t%s\n", res.ProviderID)
	fmt.Fprintf(tw, "state\t%s\n", res.State)
	fmt.Fprintf(tw, "vm\t%d on node %s\n", res.VMID, res.Node)
	if res.IPv4 != "" {
		fmt.Fprintf(tw, "ipv4\t%s\n", res.IPv4)
	}
	if res.IPv6 != "" {
		fmt.Fprintf(tw, "ipv6\t%s\n", res.IPv6)
	}
	if len(res.Addresses) > 0 {
		fmt.Fprintf(tw, "addresses\t%s\n", strings.Join(res.Addresses, " "))
	}
	fmt.Fprintf(tw, "uid\t%s\n", orDash(res.UID))
	fmt.Fprintf(tw, "created\t%s\n", timeOrDash(res.CreatedAt))
	return tw.Flush()
}

func (c *cli) lsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "The VMs on the cluster that carry pveflow's mark",
		Long: `Lists the VMs on the Proxmox cluster that carry pveflow's mark: provider ID, node, VM status
(from PVE's status cache, which lags by seconds), UID and creation time. It runs the ListProxies
workflow: one cluster resources read, and one config read per VM with pveflow's tag or name.
A VM whose config cannot be read is skipped and named on stderr. (list lists workflows.)`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.ls(cmd.Context()) },
	}
}

func (c *cli) ls(ctx context.Context) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	res, err := awaitWorkflow(ctx, c, "list proxies", c.starter.ListProxies)
	if err != nil {
		return err
	}
	if len(res.Unreadable) > 0 {
		c.say("pveflow: skipped VMs whose config could not be read (see the worker's log): %v", res.Unreadable)
	}
	if c.json {
		return c.printJSON(res)
	}
	if len(res.Proxies) == 0 {
		_, err := fmt.Fprintln(c.stdout, "no VMs carry pveflow's mark")
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	// VM STATUS is the VM's, not its proxy entity's (list's ENTITY).
	fmt.Fprintln(tw, "PROVIDER ID\tNODE\tVM STATUS\tUID\tCREATED")
	for _, p := range res.Proxies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ProviderID, p.Node, p.Status, orDash(p.UID), timeOrDash(p.CreatedAt))
	}
	return tw.Flush()
}

// unhealthy is check's error when a node is unhealthy: the result is printed, and the exit code
// says so.
type unhealthy struct{ nodes []string }

func (u unhealthy) Error() string {
	return "unhealthy: " + strings.Join(u.nodes, ", ")
}

func (c *cli) checkCommand() *cobra.Command {
	var last bool
	cmd := &cobra.Command{
		Use:   "check [--last]",
		Short: "Check every configured node: version, node, ISO storage, templates, privileges",
		Long: `Checks every configured node: the PVE version, the node's status, the ISO storage (on the node,
holding ISO images), the templates a proxy on the node is cloned from, and the API token's
privileges on every path a proxy there needs them (docs/proxmox.md). It runs the
CheckHealth workflow now; with --last it prints the latest completed run of the health
schedule the worker keeps (worker --health-every) instead.

An unhealthy node has a reason: Unauthorized, Forbidden, Unreachable, Timeout, APIError,
StorageNotFound, TemplateNotFound or MissingPrivilege. Each privilege missing is listed after
the nodes, by path; a create refuses to start on a node with one missing. Exits 8 when a node
is unhealthy.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.check(cmd.Context(), last) },
	}
	cmd.Flags().BoolVar(&last, "last", false, "print the latest scheduled check instead of running one")
	return cmd
}

func (c *cli) check(ctx context.Context, last bool) error {
	closeConn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()

	var res reads.CheckHealthResult
	if last {
		res, err = c.starter.LastHealth(ctx)
		if errors.Is(err, starter.ErrNoHealthResult) {
			return fmt.Errorf("%w; run 'pveflow check' to check now", err)
		}
	} else {
		res, err = awaitWorkflow(ctx, c, "check health", c.starter.CheckHealth)
	}
	if err != nil {
		return err
	}
	if err := c.printHealth(res); err != nil {
		return err
	}
	var bad []string
	for _, n := range res.Nodes {
		if !n.Healthy {
			bad = append(bad, n.Name)
		}
	}
	if len(bad) > 0 {
		return unhealthy{bad}
	}
	return nil
}

func (c *cli) printHealth(res reads.CheckHealthResult) error {
	if c.json {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "checked at %s\n", res.CheckedAt.Local().Format(time.DateTime))
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEALTH\tPVE\tISO STORAGE\tTEMPLATES\tMESSAGE")
	for _, n := range res.Nodes {
		health := "healthy"
		if !n.Healthy {
			health = n.Reason
		}
		storage := "-"
		if s := n.Details["isoStorage"]; s != "" && n.Details["isoStorageAvailGiB"] != "" {
			storage = fmt.Sprintf("%s (%s GiB free)", s, n.Details["isoStorageAvailGiB"])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, health, orDash(n.Details["pveVersion"]), storage,
			orDash(n.Details["templates"]), orDash(n.Message))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := c.printMissingPrivileges(res.Nodes); err != nil {
		return err
	}
	return c.printLeftovers(res)
}

// printLeftovers lists, after the nodes, the orphan disks 'pveflow gc' deletes (or leaves,
// saying why) and pveflow's VMs with "lock: clone"; nothing when there are none.
func (c *cli) printLeftovers(res reads.CheckHealthResult) error {
	if len(res.OrphanDisks) > 0 {
		fmt.Fprintln(c.stdout)
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ORPHAN DISK\tNODE\tVMID\tCREATED\tDETAIL")
		for _, d := range res.OrphanDisks {
			detail := d.Detail
			if d.Outcome == reads.GarbageFound {
				detail = "no VM has it: 'pveflow gc' deletes it"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.VolID, d.Node, d.VMID, timeOrDash(d.CreatedAt), detail)
		}
		if err := tw.Flush(); err != nil {
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

// printWarnings lists the warnings of the Proxmox tasks an operation ran, one a line under its
// result: a task that ends "WARNINGS: N" is a success, and what it warns of (a disk a destroy
// left behind) needs a person.
func (c *cli) printWarnings(warnings []string) error {
	for _, w := range warnings {
		if _, err := fmt.Fprintf(c.stdout, "  warning: %s\n", w); err != nil {
			return err
		}
	}
	return nil
}

// printMissingPrivileges lists, after the nodes, each privilege a node lacks, one a line by
// node and path; nothing when none lacks any.
func (c *cli) printMissingPrivileges(nodes []reads.NodeHealth) error {
	if !slices.ContainsFunc(nodes, func(n reads.NodeHealth) bool { return len(n.MissingPrivileges) > 0 }) {
		return nil
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPATH\tMISSING PRIVILEGE")
	for _, n := range nodes {
		for _, m := range n.MissingPrivileges {
			priv := m.Privilege
			if m.Unpropagated {
				priv += " (granted without propagate)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Name, m.Path, priv)
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}
