package devserver_test

import (
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/pveflow/pveflow/internal/devserver"
)

const taskQueue = "devserver-test"

func TestStart_uiAnswersAndNamespaceExists(t *testing.T) {
	s := start(t, devserver.Options{DBFile: dbFile(t)})

	resp, err := http.Get(s.UIURL() + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	assert.Contains(t, string(body), "<html")

	ns, err := dial(t, s).WorkflowService().DescribeNamespace(t.Context(),
		&workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	require.NoError(t, err)
	assert.Equal(t, 72*time.Hour, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
}

func TestStart_uiTellsTheBrowserItsCodecEndpoint(t *testing.T) {
	s := start(t, devserver.Options{DBFile: dbFile(t), UICodecEndpoint: "http://127.0.0.1:8081"})

	resp, err := http.Get(s.UIURL() + "/api/v1/settings")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var settings struct{ Codec struct{ Endpoint string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&settings))
	assert.Equal(t, "http://127.0.0.1:8081", settings.Codec.Endpoint)
}

func TestStart_servesPrometheusMetricsOnMetricsPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := start(t, devserver.Options{DBFile: dbFile(t), UIPort: -1, MetricsPort: port})
	require.Equal(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", s.MetricsURL())

	resp, err := http.Get(s.MetricsURL())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// The frontend's requests by operation, which the dashboard's panels of the server show.
	assert.Contains(t, string(body), "service_requests{")
}

func TestStart_refusesACodecEndpointThatIsNoURL(t *testing.T) {
	for _, endpoint := range []string{"127.0.0.1:8081", "ftp://127.0.0.1:8081", "http://"} {
		t.Run(endpoint, func(t *testing.T) {
			_, err := devserver.Start(t.Context(), devserver.Options{DBFile: dbFile(t), UICodecEndpoint: endpoint})

			require.Error(t, err)
			assert.Contains(t, err.Error(), "is not an http or https URL")
		})
	}
}

func TestStart_registersSearchAttributes(t *testing.T) {
	s := start(t, devserver.Options{
		DBFile:           dbFile(t),
		UIPort:           -1,
		SearchAttributes: map[string]string{"ProxyUID": "Keyword", "PveVMID": "Int"},
	})
	c := dial(t, s)

	list, err := c.OperatorService().ListSearchAttributes(t.Context(),
		&operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace()})
	require.NoError(t, err)
	assert.Equal(t, enumspb.INDEXED_VALUE_TYPE_KEYWORD, list.GetCustomAttributes()["ProxyUID"])
	assert.Equal(t, enumspb.INDEXED_VALUE_TYPE_INT, list.GetCustomAttributes()["PveVMID"])

	// Started at once: the frontend must know the attribute when Start returns.
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
		ID:                    "with-proxy-uid",
		TaskQueue:             taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword("ProxyUID").ValueSet("x")),
	}, "Test")
	require.NoError(t, err)
	runWorker(t, c, func(workflow.Context) error { return nil })
	require.NoError(t, run.Get(t.Context(), nil))

	// Visibility is written after the workflow closes, so it may lag a little.
	assert.EventuallyWithT(t, func(c2 *assert.CollectT) {
		found, err := c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Namespace(),
			Query:     `ProxyUID = "x"`,
		})
		require.NoError(c2, err)
		require.Len(c2, found.GetExecutions(), 1)
		assert.Equal(c2, "with-proxy-uid", found.GetExecutions()[0].GetExecution().GetWorkflowId())
	}, 10*time.Second, 100*time.Millisecond)
}

func TestStart_restartKeepsWorkflows(t *testing.T) {
	db := dbFile(t)
	awaitSignal := func(ctx workflow.Context) (string, error) {
		var msg string
		workflow.GetSignalChannel(ctx, "go").Receive(ctx, &msg)
		return msg, nil
	}

	first := start(t, devserver.Options{DBFile: db, UIPort: -1})
	c, err := client.Dial(clientOptions(first))
	require.NoError(t, err)
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(awaitSignal, workflow.RegisterOptions{Name: "Test"})
	require.NoError(t, w.Start())
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: "waits", TaskQueue: taskQueue}, "Test")
	require.NoError(t, err)
	w.Stop()
	c.Close()
	require.NoError(t, first.Stop())

	second := start(t, devserver.Options{DBFile: db, UIPort: -1})
	c2 := dial(t, second)
	desc, err := c2.DescribeWorkflowExecution(t.Context(), "waits", run.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())

	runWorker(t, c2, awaitSignal)
	require.NoError(t, c2.SignalWorkflow(t.Context(), "waits", run.GetRunID(), "go", "after restart"))
	var result string
	require.NoError(t, c2.GetWorkflow(t.Context(), "waits", run.GetRunID()).Get(t.Context(), &result))
	assert.Equal(t, "after restart", result)
}

func TestStart_keepsDatabaseInWriteAheadLogMode(t *testing.T) {
	db := dbFile(t)
	start(t, devserver.Options{DBFile: db, UIPort: -1})

	// The mode is stored in the file, so a new connection reports the server's choice.
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	require.NoError(t, err)
	defer conn.Close()
	var mode string
	require.NoError(t, conn.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, "wal", mode)
}

func TestStart_refusesDBFileInUse(t *testing.T) {
	db := dbFile(t)
	start(t, devserver.Options{DBFile: db, UIPort: -1})

	_, err := devserver.Start(t.Context(), devserver.Options{DBFile: db, UIPort: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another server")
}

func TestStart_refusesPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	for name, opts := range map[string]devserver.Options{
		"frontend": {Port: taken, UIPort: -1},
		"UI":       {UIPort: taken},
		// ServicePorts' first is the frontend's HTTP port. A later one would make the test
		// depend on the ports below the taken one being free: one was, in a CI run.
		"service": {ServicePorts: taken, UIPort: -1},
	} {
		t.Run(name, func(t *testing.T) {
			opts.DBFile = dbFile(t)
			_, err := devserver.Start(t.Context(), opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "127.0.0.1:"+strconv.Itoa(taken))
			assert.Contains(t, err.Error(), "address already in use")
		})
	}
}

func TestStart_refusesNonLoopbackIP(t *testing.T) {
	for _, ip := range []string{"0.0.0.0", "::", "192.168.1.10", "localhost"} {
		t.Run(ip, func(t *testing.T) {
			_, err := devserver.Start(t.Context(), devserver.Options{DBFile: dbFile(t), IP: ip})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "not a loopback address")
		})
	}
}

func TestStart_refusesBadStoreOrPorts(t *testing.T) {
	for name, tc := range map[string]struct {
		opts devserver.Options
		want string
	}{
		"no store":      {devserver.Options{}, "no database file given"},
		"two stores":    {devserver.Options{DBFile: "x.db", Postgres: &devserver.Postgres{}}, "both a database file and PostgreSQL given"},
		"postgres port": {devserver.Options{Postgres: &devserver.Postgres{Port: 70000}}, "PostgreSQL port 70000 is out of range"},
		"shards":        {devserver.Options{Postgres: &devserver.Postgres{HistoryShards: -1}}, "-1 history shards"},
		"service ports": {devserver.Options{DBFile: "x.db", ServicePorts: 65530}, "service ports 65530 to 65537 are out of range"},
		"membership":    {devserver.Options{Postgres: &devserver.Postgres{}, ServicePorts: 32761}, "must not exceed 32767"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := devserver.Start(t.Context(), tc.opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func dbFile(t *testing.T) string {
	return filepath.Join(t.TempDir(), "temporal.db")
}

// start starts a server on random ports, to be stopped when the test ends.
func start(t *testing.T, opts devserver.Options) *devserver.Server {
	t.Helper()
	s, err := devserver.Start(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Stop()) })
	return s
}

func clientOptions(s *devserver.Server) client.Options {
	return client.Options{
		HostPort:  s.FrontendAddress(),
		Namespace: s.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	}
}

// dial connects to s, until the test ends.
func dial(t *testing.T, s *devserver.Server) client.Client {
	t.Helper()
	c, err := client.Dial(clientOptions(s))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// runWorker runs wf as workflow type "Test" on taskQueue until the test ends.
func runWorker(t *testing.T, c client.Client, wf any) {
	t.Helper()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "Test"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
}
