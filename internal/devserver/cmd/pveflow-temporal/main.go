// Command pveflow-temporal runs a Temporal server and its Web UI on loopback for `make run`,
// keeping state in a SQLite file so that workflows survive a restart.
//
//	go run ./internal/devserver/cmd/pveflow-temporal -db .run/temporal.db -port 7233 -ui-port 8233
//
// It registers pveflow's search attributes, and any given with -search-attribute, and runs
// until interrupted. With -ui-codec-endpoint the Web UI decodes payloads through that codec
// server (pveflow codec-server).
//
// With -postgres it is instead one host of a Temporal cluster on PostgreSQL, every service in
// the process; several of them on one database, each with its own ports, are one cluster
// (`make cluster` runs two):
//
//	pveflow-temporal -postgres -pg-port 5433 -port 7233 -service-ports 7300 -ui-port 8233
//	pveflow-temporal -postgres -pg-port 5433 -port 7243 -service-ports 7310 -ui-port -1 \
//	    -cluster-address 127.0.0.1:7233
//
// Its databases and their schemas come first, from Temporal's own SQL tool, which
// `pveflow-temporal sql-tool` is (temporal-sql-tool, with the server's schemas embedded):
//
//	pveflow-temporal sql-tool --plugin postgres12 --ep 127.0.0.1 -p 5433 -u temporal --db temporal create
//	pveflow-temporal sql-tool --plugin postgres12 --ep 127.0.0.1 -p 5433 -u temporal --db temporal setup-schema -v 0.0
//	pveflow-temporal sql-tool --plugin postgres12 --ep 127.0.0.1 -p 5433 -u temporal --db temporal \
//	    update-schema --schema-name postgresql/v12/temporal
//
// and the same for the database temporal_visibility with postgresql/v12/visibility.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql" // the sql-tool's postgres12 plugin
	sqltool "go.temporal.io/server/tools/sql"

	"github.com/pveflow/pveflow/internal/devserver"
	"github.com/pveflow/pveflow/workflows/core"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sql-tool" {
		// Temporal's temporal-sql-tool as it is: its flags, commands and exit status. It exits
		// with 1 itself when a command fails.
		if err := sqltool.RunTool(append([]string{os.Args[0] + " sql-tool"}, os.Args[2:]...)); err != nil {
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pveflow-temporal:", err)
		os.Exit(1)
	}
}

func run() error {
	// The search attributes pveflow's workflows set, so that a proxy can be found in the UI.
	searchAttrs := searchAttributes(maps.Clone(core.SearchAttributes))
	db := flag.String("db", ".run/temporal.db", "SQLite `file` for the server's state, created when missing")
	ip := flag.String("ip", "127.0.0.1", "loopback `address` to listen on")
	port := flag.Int("port", 7233, "frontend gRPC `port` (0 picks a free one)")
	uiPort := flag.Int("ui-port", 8233, "Web UI `port` (0 picks a free one, -1 disables the UI)")
	namespace := flag.String("namespace", "default", "`namespace` to register")
	codecEndpoint := flag.String("ui-codec-endpoint", "", "`URL` of a codec server (pveflow codec-server) the Web UI decodes payloads with, such as http://127.0.0.1:8081")
	flag.Var(searchAttrs, "search-attribute", "search attribute `NAME=TYPE` to register besides pveflow's (repeatable)")
	servicePorts := flag.Int("service-ports", 0, "first `port` of the 8 consecutive ones of the other services: frontend HTTP, history, matching, worker, then their membership ports (-postgres only); 0 picks free ones")
	metricsPort := flag.Int("metrics-port", 0, "`port` to serve the server's Prometheus metrics on (/metrics), at -ip, as the compose file's server does; 0 serves none")
	usePostgres := flag.Bool("postgres", false, "keep the state in PostgreSQL rather than in -db, as one host of the cluster on that database")
	var pg devserver.Postgres
	flag.StringVar(&pg.Host, "pg-host", "127.0.0.1", "PostgreSQL `host` (with -postgres)")
	flag.IntVar(&pg.Port, "pg-port", 5432, "PostgreSQL `port` (with -postgres)")
	flag.StringVar(&pg.User, "pg-user", "temporal", "PostgreSQL `user` (with -postgres)")
	flag.StringVar(&pg.Password, "pg-password", "", "PostgreSQL `password` (with -postgres); default $PGPASSWORD")
	flag.StringVar(&pg.Database, "pg-db", "temporal", "the `database` of Temporal's state (with -postgres)")
	flag.StringVar(&pg.VisibilityDatabase, "pg-visibility-db", "temporal_visibility", "the `database` of Temporal's visibility (with -postgres)")
	flag.IntVar(&pg.HistoryShards, "history-shards", 4, "the cluster's `number` of history shards, the same on every server, fixed at the first start (with -postgres)")
	flag.StringVar(&pg.ClusterAddress, "cluster-address", "", "the frontend `host:port` the cluster's record names, the same on every server (with -postgres); default this server's")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (or the command sql-tool first)", flag.Args())
	}
	dbFile := *db
	var postgres *devserver.Postgres
	var onFatal func()
	if *usePostgres {
		if isSet("db") {
			return errors.New("-db and -postgres exclude each other")
		}
		if pg.Password == "" {
			pg.Password = os.Getenv("PGPASSWORD")
		}
		dbFile, postgres = "", &pg
		// A host of a cluster that failed to join it must not look up: the server logged why.
		onFatal = func() { os.Exit(1) }
	} else {
		for _, name := range []string{"pg-host", "pg-port", "pg-user", "pg-password", "pg-db", "pg-visibility-db", "history-shards", "cluster-address"} {
			if isSet(name) {
				return fmt.Errorf("-%s needs -postgres", name)
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := devserver.Start(ctx, devserver.Options{
		DBFile:           dbFile,
		Postgres:         postgres,
		IP:               *ip,
		Port:             *port,
		ServicePorts:     *servicePorts,
		UIPort:           *uiPort,
		Namespace:        *namespace,
		SearchAttributes: searchAttrs,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, nil)),
		UICodecEndpoint:  *codecEndpoint,
		MetricsPort:      *metricsPort,
		OnFatal:          onFatal,
	})
	if err != nil {
		return err
	}
	fmt.Println("Temporal server:", srv.FrontendAddress())
	if url := srv.UIURL(); url != "" {
		fmt.Println("Temporal UI:", url)
		if *codecEndpoint != "" {
			fmt.Println("Temporal UI codec endpoint:", *codecEndpoint)
		}
	}
	if url := srv.MetricsURL(); url != "" {
		fmt.Println("Temporal metrics:", url)
	}
	if postgres != nil {
		fmt.Printf("Temporal cluster: PostgreSQL %s:%d, databases %s and %s\n", pg.Host, pg.Port, pg.Database, pg.VisibilityDatabase)
		fmt.Println("Temporal history service:", srv.HistoryAddress())
	}
	fmt.Println("namespace:", srv.Namespace())

	<-ctx.Done()
	stop() // a second interrupt kills the process if stopping hangs
	return srv.Stop()
}

// isSet reports whether the flag name was given.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// searchAttributes is a flag.Value collecting NAME=TYPE pairs into a map.
type searchAttributes map[string]string

func (a searchAttributes) String() string {
	pairs := make([]string, 0, len(a))
	for _, name := range slices.Sorted(maps.Keys(a)) {
		pairs = append(pairs, name+"="+a[name])
	}
	return strings.Join(pairs, ",")
}

func (a searchAttributes) Set(s string) error {
	name, typ, ok := strings.Cut(s, "=")
	if !ok || name == "" || typ == "" {
		return errors.New("want NAME=TYPE, such as ProxyUID=Keyword")
	}
	a[name] = typ
	return nil
}
