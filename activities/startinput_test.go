package activities_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"

	"github.com/pveflow/pveflow/activities"
	"github.com/pveflow/pveflow/internal/codec"
	"github.com/pveflow/pveflow/internal/pve"
	"github.com/pveflow/pveflow/workflows"
)

// startSecret stands for a password in the user-data.
const startSecret = "start-event-sentinel-3c9d1e7a"

// historyService answers GetWorkflowExecutionHistory as the server would, and remembers the
// request.
type historyService struct {
	workflowservice.WorkflowServiceClient
	events []*historypb.HistoryEvent
	err    error
	req    *workflowservice.GetWorkflowExecutionHistoryRequest
}

func (s *historyService) GetWorkflowExecutionHistory(_ context.Context, req *workflowservice.GetWorkflowExecutionHistoryRequest, _ ...grpc.CallOption) (*workflowservice.GetWorkflowExecutionHistoryResponse, error) {
	s.req = req
	if s.err != nil {
		return nil, s.err
	}
	return &workflowservice.GetWorkflowExecutionHistoryResponse{History: &historypb.History{Events: s.events}}, nil
}

// started is a history that begins with the start event of a CreateProxy whose input dc encodes.
func started(t *testing.T, dc converter.DataConverter, userData string) []*historypb.HistoryEvent {
	t.Helper()
	return startedWith(t, dc, map[string]string{"uid": "uid-1", "image": "debian13", "userData": userData})
}

// startedWith is a history that begins with the start event of a run whose input dc encodes.
func startedWith(t *testing.T, dc converter.DataConverter, in any) []*historypb.HistoryEvent {
	t.Helper()
	input, err := dc.ToPayloads(in)
	require.NoError(t, err)
	return []*historypb.HistoryEvent{{
		EventId: 1,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
			WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input},
		},
	}}
}

// codecConverter is the data converter of a codec over a new key file.
func codecConverter(t *testing.T) converter.DataConverter {
	t.Helper()
	path := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, codec.WriteNewKeyFile(path, "activities"))
	c, err := codec.LoadKeyFile(path)
	require.NoError(t, err)
	dc, _ := codec.Converters(c)
	return dc
}

func TestHistoryStartInput_readsTheFirstEventOfTheRun(t *testing.T) {
	svc := &historyService{events: started(t, converter.GetDefaultDataConverter(), "#cloud-config\n")}
	h := &activities.HistoryStartInput{Service: svc, Namespace: "proxies"}

	_, err := h.UserData(context.Background(), "proxy/uid-1/create", "run-1")

	require.NoError(t, err)
	assert.Equal(t, "proxies", svc.req.GetNamespace())
	assert.Equal(t, "proxy/uid-1/create", svc.req.GetExecution().GetWorkflowId())
	assert.Equal(t, "run-1", svc.req.GetExecution().GetRunId())
	assert.Equal(t, int32(1), svc.req.GetMaximumPageSize(), "the start event, not the whole history")
}

func TestHistoryStartInput_decodesWithTheWorkersConverter(t *testing.T) {
	encrypted := codecConverter(t)
	tests := []struct {
		name    string
		written converter.DataConverter
		reader  converter.DataConverter
	}{
		{"plain payloads, no converter given", converter.GetDefaultDataConverter(), nil},
		{"encrypted payloads, the codec's converter", encrypted, encrypted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			userData := "#cloud-config\npassword: " + startSecret + "\n"
			h := &activities.HistoryStartInput{Service: &historyService{events: started(t, tt.written, userData)}, DataConverter: tt.reader}

			got, err := h.UserData(context.Background(), "proxy/uid-1/create", "run-1")

			require.NoError(t, err)
			assert.Equal(t, userData, got)
		})
	}
}

func TestHistoryStartInput_readsTheUserDataOfAChangeProxy(t *testing.T) {
	userData := "#cloud-config\npassword: " + startSecret + "\n"
	in := workflows.ChangeProxyInput{UID: "uid-1", Image: "debian13", MachineType: "small", UserData: userData, InstanceID: "uid-1-2"}
	h := &activities.HistoryStartInput{Service: &historyService{events: startedWith(t, converter.GetDefaultDataConverter(), in)}}

	got, err := h.UserData(context.Background(), workflows.ChangeWorkflowID("uid-1"), "run-1")

	require.NoError(t, err)
	assert.Equal(t, userData, got)
}

func TestHistoryStartInput_inputItCannotDecodeIsPermanentWithoutTheUserData(t *testing.T) {
	tests := map[string]converter.DataConverter{
		"encrypted, read without the codec": nil,
		"encrypted, read with other keys":   codecConverter(t),
	}
	for name, reader := range tests {
		t.Run(name, func(t *testing.T) {
			events := started(t, codecConverter(t), "#cloud-config\npassword: "+startSecret+"\n")
			h := &activities.HistoryStartInput{Service: &historyService{events: events}, DataConverter: reader}

			_, err := h.UserData(context.Background(), "proxy/uid-1/create", "run-1")

			require.Error(t, err)
			assert.Equal(t, pve.Permanent, pve.Classify(err))
			assert.Contains(t, err.Error(), "decode the input of workflow proxy/uid-1/create run run-1")
			assert.NotContains(t, err.Error(), startSecret)
		})
	}
}

func TestHistoryStartInput_errorClasses(t *testing.T) {
	tests := []struct {
		name   string
		svc    *historyService
		want   pve.Class
		wantIn string
	}{
		{"the run is gone", &historyService{err: serviceerror.NewNotFound("workflow execution not found")}, pve.NotFound, "workflow execution not found"},
		{"the worker may not read histories", &historyService{err: serviceerror.NewPermissionDenied("denied", "")}, pve.Permanent, "denied"},
		{"no such namespace", &historyService{err: serviceerror.NewNamespaceNotFound("proxies")}, pve.Permanent, "proxies"},
		{"the server is unavailable", &historyService{err: serviceerror.NewUnavailable("connection refused")}, pve.Transient, "connection refused"},
		{"the request timed out", &historyService{err: context.DeadlineExceeded}, pve.Transient, "deadline exceeded"},
		{"no start event", &historyService{}, pve.Permanent, "the history does not begin with one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &activities.HistoryStartInput{Service: tt.svc, Namespace: "proxies"}

			_, err := h.UserData(context.Background(), "proxy/uid-1/create", "run-1")

			assert.Equal(t, tt.want, pve.Classify(err))
			assert.ErrorContains(t, err, "workflow proxy/uid-1/create run run-1")
			assert.ErrorContains(t, err, tt.wantIn)
		})
	}
}

// startInput answers with userData or err, and remembers the run it was asked about.
type startInput struct {
	userData          string
	err               error
	workflowID, runID string
}

func (s *startInput) UserData(_ context.Context, workflowID, runID string) (string, error) {
	s.workflowID, s.runID = workflowID, runID
	return s.userData, s.err
}

func seedRequest() activities.UploadISORequest {
	return activities.UploadISORequest{
		StorageRef: activities.StorageRef{Node: "pve1", Storage: "local"},
		Name:       "proxy-test", Seed: "proxy-test", InstanceID: "uid-1",
	}
}

func TestUploadISO_userDataFromStartReadsTheActivitysRun(t *testing.T) {
	f := newFixture(t)
	in := &startInput{userData: "#cloud-config\n"}
	f.acts.StartInput = in

	require.NoError(t, f.run(t, f.acts.UploadISO, nil, seedRequest()))

	// The test environment's run of every activity.
	assert.Equal(t, "default-test-workflow-id", in.workflowID)
	assert.Equal(t, "default-test-run-id", in.runID)
	assert.Equal(t, 1, f.cluster.CallCount("UploadISO"))
}

func TestUploadISO_startInputFailureFailsTheUploadStep(t *testing.T) {
	tests := []struct {
		name          string
		startInput    activities.StartInput
		wantType      string
		wantRetryable bool
	}{
		{"transient", &startInput{err: pve.Classified(pve.Transient, errors.New("read the start event: unavailable"))}, activities.ErrTransient, true},
		{"run gone", &startInput{err: pve.Classified(pve.NotFound, errors.New("read the start event: not found"))}, activities.ErrNotFound, false},
		{"worker without a StartInput", nil, activities.ErrPermanent, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.acts.StartInput = tt.startInput

			err := f.run(t, f.acts.UploadISO, nil, seedRequest())

			appErr := appError(t, err)
			assert.Equal(t, tt.wantType, appErr.Type())
			assert.Equal(t, tt.wantRetryable, !appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "upload seed ISO proxy-test-seed.iso to storage local on node pve1: ")
			assert.Zero(t, f.cluster.CallCount("UploadISO"), "nothing uploaded")
		})
	}
}
