package activities

import (
	"context"
	"slices"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/pveflow/pveflow/internal/pve"
)

// CallPriority is the worker interceptor that gives the Proxmox calls of every activity, local
// ones too, the priority of the workflow it runs for (pve.WithPriority): pve.PriorityCare for
// the workflow types care names, which look after proxies between their operations, and the
// default priority for every other. When the call limits hold calls back (proxmox.calls), a
// backlog of checks then waits behind a create, a change or a delete instead of before it.
func CallPriority(care ...string) interceptor.WorkerInterceptor {
	return &callPriority{care: slices.Clone(care)}
}

type callPriority struct {
	interceptor.WorkerInterceptorBase
	care []string
}

func (c *callPriority) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &prioritizedActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, care: c.care}
}

type prioritizedActivity struct {
	interceptor.ActivityInboundInterceptorBase
	care []string
}

func (p *prioritizedActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if slices.Contains(p.care, activity.GetInfo(ctx).WorkflowType.Name) {
		ctx = pve.WithPriority(ctx, pve.PriorityCare)
	}
	return p.Next.ExecuteActivity(ctx, in)
}
