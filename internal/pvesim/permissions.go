package pvesim

import (
	"context"
	"time"

	"github.com/pveflow/pveflow/internal/pve"
)

// Permissions answers the token's effective privileges on path as the privilege checks of the
// model grant them: every privilege pveflow knows (pve.KnownPrivileges) but those the token
// lacks everywhere (Options.DenyPrivileges), each propagating, as a role granted on / does.
func (c *Cluster) Permissions(ctx context.Context, path string) (pve.Privileges, error) {
	return call(c, ctx, Call{Method: "Permissions"}, func(time.Time) (pve.Privileges, error) {
		privs := pve.Privileges{}
		for _, p := range pve.KnownPrivileges() {
			if !c.denied[p] {
				privs[p] = true
			}
		}
		return privs, nil
	})
}
