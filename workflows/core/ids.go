package core

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// DefaultTaskQueue is the task queue the worker polls unless told otherwise.
const DefaultTaskQueue = "pveflow"

// Workflow type names. They are recorded in histories: renaming one breaks replay.
const (
	CreateProxyName    = "CreateProxy"
	DeleteProxyName    = "DeleteProxy"
	CloneAdmissionName = "CloneAdmission"
	GetProxyName       = "GetProxy"
	ListProxiesName    = "ListProxies"
	CheckHealthName    = "CheckHealth"
	CollectGarbageName = "CollectGarbage"
	ProxyName          = "Proxy"
	ChangeProxyName    = "ChangeProxy"
	RolloutName        = "Rollout"
)

// CareWorkflows are the workflow types that look after proxies between their operations: a
// proxy's check, the observer's listing, the worker's health check and the garbage collection.
// Their Proxmox calls wait behind any other's (activities.CallPriority).
var CareWorkflows = []string{GetProxyName, ObserverName, CheckHealthName, CollectGarbageName}

// The Updates a Proxy entity takes (see package proxyvm). Their names are recorded in histories.
const (
	// CreateUpdate asks for the proxy to be present with a ProxySpec's spec; its result
	// is a CreateProxyResult.
	CreateUpdate = "create"
	// ChangeUpdate asks for a present proxy to change (a ChangeRequest); its result is a
	// ChangeProxyResult.
	ChangeUpdate = "change"
	// DeleteUpdate asks for the proxy to be absent (a DeleteProxyInput); its result is a
	// DeleteProxyResult.
	DeleteUpdate = "delete"
)

// ProxyWorkflowID is the workflow ID of the Proxy entity of a Proxy UID. Its operations are its
// children, under IDs of their own: CreateWorkflowID, ChangeWorkflowID, DeleteWorkflowID.
func ProxyWorkflowID(uid string) string { return "proxy/" + uid }

// ChangeWorkflowID is the workflow ID of the ChangeProxy of a Proxy UID.
func ChangeWorkflowID(uid string) string { return "proxy/" + uid + "/change" }

// RolloutWorkflowID is the workflow ID of one Rollout.
func RolloutWorkflowID(requestID string) string { return "rollout/" + requestID }

// ProxyOptions are the start options of the Proxy entity of uid, for UpdateWithStart: the
// entity that runs takes the request, and one is started when none runs.
func ProxyOptions(uid, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       ProxyWorkflowID(uid),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes:    temporal.NewSearchAttributes(ProxyUIDKey.ValueSet(uid)),
	}
}

// StatusQuery is the query both workflows answer with their Status.
const StatusQuery = "status"

// CreateWorkflowID is the workflow ID of the CreateProxy of a Proxy UID.
//
// Each kind of operation has an ID of its own under its entity's, so the UI and a client find
// the one that runs, or ran last, by its kind.
func CreateWorkflowID(uid string) string { return "proxy/" + uid + "/create" }

// DeleteWorkflowID is the workflow ID of the DeleteProxy of a Proxy UID.
func DeleteWorkflowID(uid string) string { return "proxy/" + uid + "/delete" }

// GetProxyWorkflowID is the workflow ID of one GetProxy of key, a Proxy UID or a provider ID.
// Every read has a request ID of its own (the starter makes a random one), so reads of one
// proxy run beside each other and beside its create and delete, whose IDs they never take.
func GetProxyWorkflowID(key, requestID string) string { return "get-proxy/" + key + "/" + requestID }

// ListProxiesWorkflowID is the workflow ID of one ListProxies.
func ListProxiesWorkflowID(requestID string) string { return "list-proxies/" + requestID }

// CheckHealthWorkflowID is the workflow ID of one CheckHealth run on request (pveflow check).
func CheckHealthWorkflowID(requestID string) string { return "check-health/" + requestID }

// CollectGarbageWorkflowID is the workflow ID of one CollectGarbage. Every run has a request ID
// of its own: two runs at once are harmless, as each deletes through the Proxy entity of a UID,
// which runs one operation at a time.
func CollectGarbageWorkflowID(requestID string) string { return "collect-garbage/" + requestID }

// HealthScheduleID is the ID of the Temporal Schedule that runs CheckHealth on taskQueue.
func HealthScheduleID(taskQueue string) string { return "check-health/" + taskQueue }

// HealthScheduleWorkflowID is the workflow ID the health schedule of taskQueue gives its runs,
// before Temporal appends the time each run was due.
func HealthScheduleWorkflowID(taskQueue string) string { return "check-health/scheduled/" + taskQueue }

// ReadTimeout bounds a read workflow's run (GetProxy, ListProxies, CheckHealth): each of its
// calls gets one attempt and one retry of budgets.request, so a run that is not over by then
// has met no worker, and it ends rather than waiting for one.
const ReadTimeout = 5 * time.Minute

// ReadOptions are the start options of a read workflow with workflow ID id.
func ReadOptions(id, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                taskQueue,
		WorkflowExecutionTimeout: ReadTimeout,
	}
}

// Search attributes that make a proxy findable in the UI and by the starter's list. They must be
// registered on the namespace (see docs/operations.md).
var (
	ProxyUIDKey   = temporal.NewSearchAttributeKeyKeyword("ProxyUID")
	ProxyNameKey  = temporal.NewSearchAttributeKeyKeyword("ProxyName")
	ProxyPhaseKey = temporal.NewSearchAttributeKeyKeyword("ProxyPhase")
	PveNodeKey    = temporal.NewSearchAttributeKeyKeyword("PveNode")
	PveVMIDKey    = temporal.NewSearchAttributeKeyInt64("PveVMID")
)

// SearchAttributes lists the search attributes and their types, for registering them.
var SearchAttributes = map[string]string{
	"ProxyUID":   "Keyword",
	"ProxyName":  "Keyword",
	"ProxyPhase": "Keyword",
	"PveNode":    "Keyword",
	"PveVMID":    "Int",
}
