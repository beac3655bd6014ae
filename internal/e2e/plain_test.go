package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pveflow/pveflow/internal/config"
	"github.com/pveflow/pveflow/internal/nocloud"
	"github.com/pveflow/pveflow/internal/proxy"
	"github.com/pveflow/pveflow/internal/pve"
)

// plainProgram creates and deletes one proxy as a sequential Go program would, with no Temporal:
// the same seam, simulator and poll cadence as pveflow, the same steps in the same order, and
// none of pveflow's checks (ownership, locks, placement, admission). It is what pveflow's own
// overhead is read against.
type plainProgram struct {
	api  pve.API
	cfg  config.Config
	poll config.Poll
}

func (p plainProgram) createAndDelete(ctx context.Context, uid string, vmid int) error {
	pl, err := p.cfg.Proxmox.ResolvePlacement("", "debian13", "small")
	if err != nil {
		return err
	}
	if pl, err = pl.WithNode(pl.Candidates[0]); err != nil {
		return err
	}
	node, name, iso := pl.Node, proxy.NameFromUID(uid), p.cfg.Proxmox.ISOStorage
	seedName := proxy.SeedISOName(name)
	volid := proxy.SeedVolID(iso, name)

	upid, err := p.api.Clone(ctx, node, pl.TemplateVMID, pve.CloneParams{NewID: vmid, Name: name, Full: true,
		Description: proxy.FormatDescription(proxy.Mark{UID: uid})})
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	cfg, err := p.api.VMConfig(ctx, node, vmid)
	if err != nil {
		return err
	}
	var seed bytes.Buffer
	size, err := nocloud.Write(&seed, nocloud.Seed{InstanceID: uid, Hostname: name, UserData: "#cloud-config\n"})
	if err != nil {
		return err
	}
	upid, err = p.api.UploadISO(ctx, node, iso, seedName, &seed, size)
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if err := p.api.SetVMConfig(ctx, node, vmid, pve.VMConfig{"cores": fmt.Sprint(pl.Cores), "memory": fmt.Sprint(pl.MemoryMiB),
		"agent": "1", "ide2": volid + ",media=cdrom"}); err != nil {
		return err
	}
	disk, err := proxy.BootDisk(cfg)
	if err != nil {
		return err
	}
	upid, err = p.api.Resize(ctx, node, vmid, disk, fmt.Sprintf("%dG", pl.DiskGiB))
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	upid, err = p.api.Start(ctx, node, vmid)
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	mac := proxy.MACFromNet(cfg["net0"])
	if err := p.until(ctx, func() (bool, error) {
		ifaces, err := p.api.AgentNetworkInterfaces(ctx, node, vmid)
		if pve.Classify(err) == pve.AgentNotRunning {
			return false, nil
		}
		return err == nil && len(proxy.Addresses{}.Missing(ifaces, mac)) == 0, err
	}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := p.api.SetVMConfig(ctx, node, vmid, pve.VMConfig{"ide2": "none,media=cdrom"}); err != nil {
		return err
	}
	upid, err = p.api.DeleteVolume(ctx, node, iso, volid)
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("delete seed: %w", err)
	}

	upid, err = p.api.Stop(ctx, node, vmid)
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	upid, err = p.api.Destroy(ctx, node, vmid)
	if err := p.wait(ctx, node, upid, err); err != nil {
		return fmt.Errorf("destroy: %w", err)
	}
	upid, err = p.api.DeleteVolume(ctx, node, iso, volid)
	if err := p.wait(ctx, node, upid, err); err != nil && pve.Classify(err) != pve.NotFound {
		return fmt.Errorf("delete seed: %w", err)
	}
	return nil
}

// wait waits for the task upid a call started, unless the call failed with err.
func (p plainProgram) wait(ctx context.Context, node string, upid pve.UPID, err error) error {
	if err != nil || upid == "" {
		return err
	}
	return p.until(ctx, func() (bool, error) {
		st, err := p.api.TaskStatus(ctx, node, upid)
		if err != nil || !st.Done() {
			return false, err
		}
		_, err = st.Result()
		return true, err
	})
}

// until looks at once, then at the poll settings' pace (config.Poll.NextLook), as pveflow's
// waits do, until done says so.
func (p plainProgram) until(ctx context.Context, done func() (bool, error)) error {
	since := time.Now()
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New("gave up waiting"))
		case <-time.After(p.poll.NextLook(time.Since(since))):
		}
	}
}

func TestPlainProgram_createsAndDeletesAProxyLeavingNothing(t *testing.T) {
	cluster := newCluster()
	cfg := fastConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err := plainProgram{api: cluster, cfg: cfg, poll: cfg.Poll}.createAndDelete(ctx, uid, proxy.VMIDFor(uid, cfg.Proxmox.VMIDRange, 0))

	require.NoError(t, err)
	assert.Len(t, cluster.CloneRuns(), 1)
	assert.Empty(t, leftovers(cluster))
}
