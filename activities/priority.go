package activities

import (
	"context"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/pve"
)

// CallPriority is the worker interceptor that gives the Proxmox calls of every activity, local
// ones too, the priority of the workflow it runs for (pve.WithPriority): pve.PriorityCare for
// the workflow types care names, which look after proxies between their operations, and the
// default priority for every other. When the call limits hold calls back (proxmox.calls), a
// backlog of checks then waits behind a create, a change or a delete instead of before it.
// Among the calls of one priority, those of the workflow started first go first
// (pve.WithOrder): the workflow's start time travels with each activity it schedules, in a
// header (callOrderHeader), since an activity's own information does not say it.
func CallPriority(care ...string) interceptor.WorkerInterceptor {
	return &callPriority{care: slices.Clone(care)}
}

// callOrderHeader is the header that carries the start time of the workflow an activity runs
// for; it names nothing secret, and so is a plain payload, as the tracing headers are.
const callOrderHeader = "pveflow-call-order"

type callPriority struct {
	interceptor.WorkerInterceptorBase
	care []string
}

func (c *callPriority) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &prioritizedActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, care: c.care}
}

func (c *callPriority) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &orderingWorkflow{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type prioritizedActivity struct {
	interceptor.ActivityInboundInterceptorBase
	care []string
}

func (p *prioritizedActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if slices.Contains(p.care, activity.GetInfo(ctx).WorkflowType.Name) {
		ctx = pve.WithPriority(ctx, pve.PriorityCare)
	}
	if payload := interceptor.Header(ctx)[callOrderHeader]; payload != nil {
		var started time.Time
		if converter.GetDefaultDataConverter().FromPayload(payload, &started) == nil {
			ctx = pve.WithOrder(ctx, started)
		}
	}
	return p.Next.ExecuteActivity(ctx, in)
}

// orderingWorkflow has every activity its workflow schedules carry the workflow's start time.
type orderingWorkflow struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (w *orderingWorkflow) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return w.Next.Init(&orderingOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

type orderingOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *orderingOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	stampStart(ctx)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *orderingOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	stampStart(ctx)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// stampStart writes the workflow's start time into the header of the activity being scheduled.
func stampStart(ctx workflow.Context) {
	header := interceptor.WorkflowHeader(ctx)
	if header == nil {
		return
	}
	if payload, err := converter.GetDefaultDataConverter().ToPayload(workflow.GetInfo(ctx).WorkflowStartTime); err == nil {
		header[callOrderHeader] = payload
	}
}
