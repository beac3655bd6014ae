// Package devserver runs a Temporal server and its Web UI in the calling process, with state in
// a SQLite file, for pveflow's `make run` and end-to-end tests.
//
// It does what `temporal server start-dev --db-filename FILE` does, on the server's public
// temporal package: a workflow that is running when the server stops carries on when a server
// starts again on the same file. Only loopback addresses are served.
//
// With Options.Postgres it runs instead one host of a Temporal cluster on PostgreSQL, every
// service in the process, for `make cluster`: several such servers on one database are one
// cluster, whose services find each other through ringpop and share the history shards. The
// databases and their schemas must exist (pveflow-temporal sql-tool sets them up).
//
// The database file is locked with flock(2) while a server runs on it, so the package builds on
// Linux, macOS and the BSDs.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiopts "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/metrics"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"google.golang.org/protobuf/types/known/durationpb"
)

// retention is how long closed workflows stay visible in a namespace the server registers.
const retention = 72 * time.Hour

// startTimeout bounds how long Start waits for the frontend and the UI to answer.
const startTimeout = time.Minute

// Options configures a Server. Only DBFile is required, or Postgres instead.
type Options struct {
	DBFile           string            // SQLite file; created with the schema when missing, reused otherwise
	Postgres         *Postgres         // when set, the server is a host of a cluster on PostgreSQL, and DBFile must be ""
	IP               string            // default "127.0.0.1"; a non-loopback address is refused
	Port             int               // frontend gRPC port; 0 picks a free one
	UIPort           int               // Web UI port; 0 picks a free one; -1 disables the UI
	Namespace        string            // default "default"; registered if missing (retention 72h)
	SearchAttributes map[string]string // name -> type ("Keyword", "Int", ...), registered if missing
	Logger           *slog.Logger      // server logs go here at warn+ (the server is chatty); nil discards
	// ServicePorts is the first of the eight consecutive ports the other services take: the
	// frontend's HTTP, history, matching and worker gRPC, then the frontend's, history's,
	// matching's and worker's membership (ringpop), which only a server on PostgreSQL uses
	// and which must not exceed 32767 there. 0 picks a free port for each.
	ServicePorts int
	// OnFatal, if set, is called after the server logged a fatal error, one it cannot go on
	// after: a host of a cluster whose membership failed to start (say) serves nothing, yet
	// looks up. The command exits there; nil only logs it.
	OnFatal func()
	// UICodecEndpoint is the URL of a codec server the Web UI's pages (the browser, not the
	// UI's server) post payloads to for decoding, such as http://127.0.0.1:8081; "" for none.
	// The codec server must allow the UI's origin, UIURL.
	UICodecEndpoint string
	// MetricsPort is the port, on IP, of the server's Prometheus metrics (/metrics), served as
	// the compose file's server serves them (PROMETHEUS_ENDPOINT), so that the dashboard's
	// panels of the server can be tested against them; 0 serves none.
	MetricsPort int
}

// Postgres is where a server's state is on PostgreSQL, and the cluster it joins there.
type Postgres struct {
	Host               string // default "127.0.0.1"
	Port               int    // default 5432
	User               string // default "temporal"
	Password           string
	Database           string // default "temporal"
	VisibilityDatabase string // default "temporal_visibility"
	// HistoryShards is the cluster's number of history shards, default 4. The first server
	// on the database records it; every other must give the same, and it never changes.
	HistoryShards int
	// ClusterAddress is the frontend address the cluster's record in the database names;
	// every server of the cluster must give the same. Default: this server's frontend.
	ClusterAddress string
}

// withDefaults returns pg with its defaults applied, and the cluster address defaulting to frontend.
func (pg Postgres) withDefaults(frontend string) *Postgres {
	if pg.Host == "" {
		pg.Host = "127.0.0.1"
	}
	if pg.Port == 0 {
		pg.Port = 5432
	}
	if pg.User == "" {
		pg.User = "temporal"
	}
	if pg.Database == "" {
		pg.Database = "temporal"
	}
	if pg.VisibilityDatabase == "" {
		pg.VisibilityDatabase = "temporal_visibility"
	}
	if pg.HistoryShards == 0 {
		pg.HistoryShards = 4
	}
	if pg.ClusterAddress == "" {
		pg.ClusterAddress = frontend
	}
	return &pg
}

// A Server is a running Temporal server, and its Web UI unless disabled.
type Server struct {
	temporal   temporal.Server
	ui         *uiserver.Server
	lock       *os.File
	frontend   string
	history    string
	uiURL      string
	metricsURL string
	namespace  string
	logLevel   slog.LevelVar // the least level of the server's logs passed on

	stopOnce sync.Once
	stopErr  error
}

// Start starts a server on opts.DBFile and returns once its frontend and UI answer, the
// namespace exists and the search attributes are registered.
//
// It fails without starting anything when a port is taken or another server runs on the
// same file.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	saTypes, err := opts.validate()
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	s := &Server{namespace: opts.Namespace}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	if opts.Postgres == nil {
		if err := os.MkdirAll(filepath.Dir(opts.DBFile), 0o755); err != nil {
			return nil, fmt.Errorf("devserver: %w", err)
		}
		// SQLite lets a second server open the file, and the two would then take the history
		// shard from each other; a lock next to the file keeps it to one.
		s.lock, err = lockFile(opts.DBFile + ".lock")
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("devserver: database %s is in use by another server", opts.DBFile)
		}
		if err != nil {
			return nil, fmt.Errorf("devserver: locking database %s: %w", opts.DBFile, err)
		}
	}

	// The UI exits the process when it cannot listen, so its port is checked here with the
	// server's own ports rather than found taken later.
	p := ports{frontend: opts.Port, ui: opts.UIPort}
	reserve := []*int{&p.frontend}
	services := p.servicePorts()
	if opts.Postgres == nil {
		services = services[:4] // no membership: the hosts are static
	}
	for i, port := range services {
		if opts.ServicePorts > 0 {
			*port = opts.ServicePorts + i
		}
	}
	reserve = append(reserve, services[:4]...)
	if opts.UIPort >= 0 {
		reserve = append(reserve, &p.ui)
	}
	if err := reservePorts(opts.IP, reserve, services[4:]); err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	s.frontend = hostPort(opts.IP, p.frontend)
	s.history = hostPort(opts.IP, p.history)

	var cfg *config.Config
	var hosts temporal.ServerOption
	var joins string // the address of the cluster this server joins, "" when it is the cluster's own
	if pg := opts.Postgres; pg != nil {
		pg = pg.withDefaults(s.frontend)
		if pg.ClusterAddress != s.frontend {
			joins = pg.ClusterAddress
		}
		if err := setUpPostgres(pg, opts.Namespace, saTypes); err != nil {
			return nil, fmt.Errorf("devserver: PostgreSQL %s: %w", hostPort(pg.Host, pg.Port), err)
		}
		cfg = postgresServerConfig(opts.IP, p, pg)
	} else {
		sqlCfg := sqliteConfig(opts.DBFile)
		if err := setUpDatabase(sqlCfg, opts.DBFile, opts.Namespace); err != nil {
			return nil, fmt.Errorf("devserver: database %s: %w", opts.DBFile, err)
		}
		cfg = serverConfig(opts.IP, p, sqlCfg)
		hosts = temporal.WithStaticHosts(staticHosts(opts.IP, p))
	}
	if opts.MetricsPort != 0 {
		cfg.Global.Metrics = &metrics.Config{Prometheus: &metrics.PrometheusConfig{
			TimerType: "histogram", ListenAddress: hostPort(opts.IP, opts.MetricsPort)}}
		s.metricsURL = "http://" + hostPort(opts.IP, opts.MetricsPort) + "/metrics"
	}

	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s.logLevel.Set(slog.LevelWarn)
	serverOpts := []temporal.ServerOption{
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithConfig(cfg),
		temporal.WithLogger(serverLogger{logger, &s.logLevel, opts.OnFatal}),
		temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{
			// Search attributes registered at start are then usable at once.
			dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
			// A history shard reads its transfer and timer queues at most 20 times a second by
			// default, a budget made for clusters of hundreds of shards; with one shard (four
			// for make cluster) a loaded server then starts each workflow task 25 to 50 ms after
			// it was scheduled, where an idle one takes 2 ms, and a clone slot's turn takes three
			// in a row (docs/performance.md). The compose file's server has the same.
			dynamicconfig.TransferProcessorMaxPollRPS.Key(): 200,
			dynamicconfig.TimerProcessorMaxPollRPS.Key():    200,
			// A timer (an activity's retry, a workflow's sleep) fires up to this long after its
			// time; the default, 1 s, held every retry sooner than that to a second, such as a
			// clone's looks around its expected end. The compose file's server has the same.
			dynamicconfig.TimerProcessorMaxTimeShift.Key(): 10 * time.Millisecond,
		}),
	}
	if hosts != nil {
		serverOpts = append(serverOpts, hosts)
	}
	srv, err := temporal.NewServer(serverOpts...)
	if err != nil {
		return nil, fmt.Errorf("devserver: configuring server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("devserver: starting server: %w", err)
	}
	s.temporal = srv

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  s.frontend,
		Namespace: opts.Namespace,
		Logger:    sdklog.NewStructuredLogger(logger),
	})
	if err != nil {
		return nil, fmt.Errorf("devserver: connecting to frontend %s: %w", s.frontend, err)
	}
	defer c.Close()
	if err := registerSearchAttributes(ctx, c.OperatorService(), opts.Namespace, saTypes); err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	if joins != "" {
		settleCtx, cancel := context.WithTimeout(ctx, settleTimeout)
		err := awaitSettled(settleCtx, s.frontend, joins, s.history)
		cancel()
		if err != nil {
			// The cluster works unsettled, if slowly for a while: not a reason to fail the start.
			logger.Warn("devserver: joined the cluster at "+joins+", but it had not settled", "error", err)
		}
	}

	if opts.UIPort < 0 {
		return s, nil
	}
	uiHost := opts.IP
	if strings.Contains(uiHost, ":") {
		uiHost = "[" + uiHost + "]" // the UI joins host and port with a bare colon
	}
	s.ui = uiserver.NewServer(uiopts.WithConfigProvider(&uiconfig.Config{
		Host:                uiHost,
		Port:                p.ui,
		TemporalGRPCAddress: s.frontend,
		EnableUI:            true,
		DefaultNamespace:    opts.Namespace,
		CORS:                uiconfig.CORS{CookieInsecure: true}, // plain HTTP on loopback
		HideLogs:            true,
		DisableNewsFetch:    true, // the browser would fetch it from temporal.io
		Codec:               uiconfig.Codec{Endpoint: opts.UICodecEndpoint},
	}))
	// Start returns when Stop closes the UI: it exits the process itself on any other error.
	go s.ui.Start()
	s.uiURL = "http://" + hostPort(opts.IP, p.ui)
	if err := waitForUI(ctx, s.uiURL); err != nil {
		return nil, fmt.Errorf("devserver: web UI at %s: %w", s.uiURL, err)
	}
	return s, nil
}

// FrontendAddress returns the host:port of the frontend's gRPC service, for client.Options.HostPort.
func (s *Server) FrontendAddress() string { return s.frontend }

// HistoryAddress returns the host:port of the history service's gRPC: the owner that the
// history shards of this server record in the database (as "<address>-<sequence>-<uuid>").
func (s *Server) HistoryAddress() string { return s.history }

// UIURL returns the Web UI's base URL, or "" when the UI is disabled.
func (s *Server) UIURL() string { return s.uiURL }

// MetricsURL returns the URL of the server's Prometheus metrics, or "" when it serves none.
func (s *Server) MetricsURL() string { return s.metricsURL }

// Namespace returns the namespace Start registered.
func (s *Server) Namespace() string { return s.namespace }

// Stop stops the UI and the server and releases the database file, so that a server can
// start on it again. Calls after the first return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.logLevel.Set(slog.LevelError)
		if s.ui != nil {
			s.ui.Stop()
		}
		var errs []error
		if s.temporal != nil {
			if err := s.temporal.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("devserver: stopping server: %w", err))
			}
		}
		if s.lock != nil {
			errs = append(errs, s.lock.Close())
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// validate checks opts, with defaults applied, and returns the search attributes' types.
func (o Options) validate() (map[string]enumspb.IndexedValueType, error) {
	switch {
	case o.Postgres == nil && o.DBFile == "":
		return nil, errors.New("no database file given")
	case o.Postgres != nil && o.DBFile != "":
		return nil, errors.New("both a database file and PostgreSQL given")
	case o.Postgres != nil && (o.Postgres.Port < 0 || o.Postgres.Port > 65535):
		return nil, fmt.Errorf("PostgreSQL port %d is out of range", o.Postgres.Port)
	case o.Postgres != nil && o.Postgres.HistoryShards < 0:
		return nil, fmt.Errorf("%d history shards", o.Postgres.HistoryShards)
	}
	if ip := net.ParseIP(o.IP); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("IP %q is not a loopback address: the dev server has no authentication", o.IP)
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("port %d is out of range", o.Port)
	}
	if o.ServicePorts < 0 || o.ServicePorts > 65535-7 {
		return nil, fmt.Errorf("service ports %d to %d are out of range", o.ServicePorts, o.ServicePorts+7)
	}
	if o.Postgres != nil && o.ServicePorts+7 > maxMembershipPort {
		return nil, fmt.Errorf("service ports %d to %d: the membership ports (the last four) must not exceed %d, as Temporal's PostgreSQL schema keeps them as a smallint",
			o.ServicePorts, o.ServicePorts+7, maxMembershipPort)
	}
	if o.UIPort < -1 || o.UIPort > 65535 {
		return nil, fmt.Errorf("UI port %d is out of range", o.UIPort)
	}
	if o.UICodecEndpoint != "" {
		if u, err := url.Parse(o.UICodecEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("UI codec endpoint %q is not an http or https URL", o.UICodecEndpoint)
		}
	}
	types := make(map[string]enumspb.IndexedValueType, len(o.SearchAttributes))
	for name, typ := range o.SearchAttributes {
		t, err := enumspb.IndexedValueTypeFromString(typ)
		if err != nil || t == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			return nil, fmt.Errorf("search attribute %s: unknown type %q", name, typ)
		}
		types[name] = t
	}
	return types, nil
}

// maxMembershipPort is the highest membership port: Temporal's PostgreSQL schema keeps a host's
// membership port as a smallint (cluster_membership.rpc_port), and a host on a higher one
// fails to join the cluster.
const maxMembershipPort = 32767

// reservePorts replaces each 0 in ports with a free port, and each 0 in membershipPorts with a
// free port up to maxMembershipPort (the kernel hands out higher ones), after checking that
// every port can be listened on. All are held at once so that no free port is handed out twice.
func reservePorts(ip string, ports, membershipPorts []*int) error {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	listen := func(port *int, at int) error {
		l, err := net.Listen("tcp", hostPort(ip, at))
		if err != nil {
			return err
		}
		held = append(held, l)
		*port = l.Addr().(*net.TCPAddr).Port
		return nil
	}
	for _, port := range ports {
		if err := listen(port, *port); err != nil {
			return err
		}
	}
	for _, port := range membershipPorts {
		if *port != 0 {
			if err := listen(port, *port); err != nil {
				return err
			}
			continue
		}
		var err error
		for range 100 {
			if err = listen(port, 20000+rand.IntN(maxMembershipPort-20000+1)); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("no free membership port found up to %d: %w", maxMembershipPort, err)
		}
	}
	return nil
}

// setUpDatabase creates the schema when file does not exist yet, and the namespace when it is
// missing. It runs before the server starts, so the namespace is there from the first request.
func setUpDatabase(cfg *config.SQL, file, namespace string) error {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		if err := sqliteschema.SetupSchema(cfg); err != nil {
			return fmt.Errorf("creating schema: %w", err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, namespace, false, nil)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	ns.Detail.Config.Retention = durationpb.New(retention)
	if err := sqliteschema.CreateNamespaces(cfg, ns); err != nil {
		return fmt.Errorf("registering namespace %s: %w", namespace, err)
	}
	return nil
}

// setUpPostgres registers the namespace, with the search attributes, when it is missing. The
// schema must be there: pveflow-temporal sql-tool sets it up. It runs before the server starts
// as setUpDatabase does, so that no service of any server of the cluster knows the namespace
// without its attributes.
func setUpPostgres(pg *Postgres, namespace string, searchAttrs map[string]enumspb.IndexedValueType) error {
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, namespace, false, searchAttrs)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	ns.Detail.Config.Retention = durationpb.New(retention)
	// CreateNamespaces is the sqlite package's, but works on any SQL plugin's database.
	if err := sqliteschema.CreateNamespaces(postgresConfig(pg, pg.Database), ns); err != nil {
		return fmt.Errorf("registering namespace %s in database %s (is its schema set up? pveflow-temporal sql-tool): %w", namespace, pg.Database, err)
	}
	return nil
}

// registerSearchAttributes adds the attributes of want that namespace lacks. One that exists
// with another type is an error rather than left for a workflow start to trip over.
func registerSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, namespace string, want map[string]enumspb.IndexedValueType) error {
	if len(want) == 0 {
		return nil
	}
	resp, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("listing search attributes of namespace %s: %w", namespace, err)
	}
	missing := make(map[string]enumspb.IndexedValueType)
	for name, typ := range want {
		have, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case have != typ:
			return fmt.Errorf("search attribute %s of namespace %s is a %s, not a %s", name, namespace, have, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        namespace,
		SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("adding search attributes to namespace %s: %w", namespace, err)
	}
	return nil
}

// waitForUI polls url until it answers 200.
func waitForUI(ctx context.Context, url string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}
