package pvesim

import (
	"fmt"
	"time"
)

// HoldLock sets VM vmid's lock property (such as "backup") for d, as a nightly vzdump sets it on
// the VM it backs up: PVE then refuses a clone of it, a config write to it, and the other calls
// that check the lock, with "VM is locked (<lock>)". The lock goes when d has passed.
func (c *Cluster) HoldLock(vmid int, lock string, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.advance(now)
	g := c.vms[vmid]
	switch {
	case g == nil:
		return fmt.Errorf("pvesim: hold lock on VM %d: no such VM", vmid)
	case g.cfg["lock"] != "":
		return fmt.Errorf("pvesim: hold lock on VM %d: it is locked (%s) already", vmid, g.cfg["lock"])
	}
	g.cfg["lock"] = lock
	c.at(now.Add(d), func() {
		if c.vms[vmid] == g && g.cfg["lock"] == lock {
			delete(g.cfg, "lock")
		}
	})
	return nil
}
