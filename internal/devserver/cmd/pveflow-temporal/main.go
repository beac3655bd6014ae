// Command pveflow-temporal runs a Temporal server and its Web UI on loopback for `make run`,
// keeping state in a SQLite file so that workflows survive a restart.
//
//	go run ./internal/devserver/cmd/pveflow-temporal -db .run/temporal.db -port 7233 -ui-port 8233
//
// It registers pveflow's search attributes, and any given with -search-attribute, and runs
// until interrupted. With -ui-codec-endpoint the Web UI decodes payloads through that codec
// server (pveflow codec-server).
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

	"github.com/pveflow/pveflow/internal/devserver"
	"github.com/pveflow/pveflow/workflows"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pveflow-temporal:", err)
		os.Exit(1)
	}
}

func run() error {
	// The search attributes pveflow's workflows set, so that a proxy can be found in the UI.
	searchAttrs := searchAttributes(maps.Clone(workflows.SearchAttributes))
	db := flag.String("db", ".run/temporal.db", "SQLite `file` for the server's state, created when missing")
	ip := flag.String("ip", "127.0.0.1", "loopback `address` to listen on")
	port := flag.Int("port", 7233, "frontend gRPC `port` (0 picks a free one)")
	uiPort := flag.Int("ui-port", 8233, "Web UI `port` (0 picks a free one, -1 disables the UI)")
	namespace := flag.String("namespace", "default", "`namespace` to register")
	codecEndpoint := flag.String("ui-codec-endpoint", "", "`URL` of a codec server (pveflow codec-server) the Web UI decodes payloads with, such as http://127.0.0.1:8081")
	flag.Var(searchAttrs, "search-attribute", "search attribute `NAME=TYPE` to register besides pveflow's (repeatable)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := devserver.Start(ctx, devserver.Options{
		DBFile:           *db,
		IP:               *ip,
		Port:             *port,
		UIPort:           *uiPort,
		Namespace:        *namespace,
		SearchAttributes: searchAttrs,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, nil)),
		UICodecEndpoint:  *codecEndpoint,
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
	fmt.Println("namespace:", srv.Namespace())

	<-ctx.Done()
	stop() // a second interrupt kills the process if stopping hangs
	return srv.Stop()
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
