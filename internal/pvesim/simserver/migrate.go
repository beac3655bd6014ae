package simserver

import (
	"context"

	"github.com/pveflow/pveflow/internal/pve"
)

// The migration's endpoint, beside the others (routes.go).
func init() {
	endpoints["POST /nodes/{node}/qemu/{vmid}/migrate"] = migrate
}

func migrate(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	target, err := stringParam(c.params, "target")
	if err != nil {
		return nil, err
	}
	online, err := boolParam(c.params, "online")
	if err != nil {
		return nil, err
	}
	withLocalDisks, err := boolParam(c.params, "with-local-disks")
	if err != nil {
		return nil, err
	}
	return result(api.Migrate(ctx, c.node, c.vmid, pve.MigrateParams{Target: target, Online: online, WithLocalDisks: withLocalDisks}))
}
