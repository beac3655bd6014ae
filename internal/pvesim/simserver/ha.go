package simserver

import (
	"context"

	"github.com/pveflow/pveflow/internal/pve"
)

// The HA manager's endpoints, beside the others (routes.go).
func init() {
	endpoints["GET /cluster/ha/status/manager_status"] = func(ctx context.Context, api pve.API, _ *apiCall) (any, error) {
		return result(api.HAManagerStatus(ctx))
	}
	endpoints["POST /cluster/ha/resources"] = addHAResource
	endpoints["DELETE /cluster/ha/resources/{sid}"] = func(ctx context.Context, api pve.API, c *apiCall) (any, error) {
		return nil, api.DeleteHAResource(ctx, c.sid)
	}
}

func addHAResource(ctx context.Context, api pve.API, c *apiCall) (any, error) {
	sid, err := stringParam(c.params, "sid")
	if err != nil {
		return nil, err
	}
	return nil, api.AddHAResource(ctx, pve.HAResourceParams{SID: sid, State: c.params.Get("state"), Comment: c.params.Get("comment")})
}
