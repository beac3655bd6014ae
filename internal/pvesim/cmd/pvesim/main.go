// Command pvesim serves the simulated Proxmox VE cluster over its REST API on loopback, for the
// demo and for trying pveflow's client, worker or curl against something that answers like PVE.
//
//	go run ./internal/pvesim/cmd/pvesim -listen 127.0.0.1:8006 -dir .run/pvesim
//
// It starts pvesim's default cluster (nodes pve1 and pve2, template 9000) with real time,
// task durations of a small real host, the status cache's lag and a guest agent that takes a
// few seconds to come up, prints where the CA and token files are, and runs until interrupted.
// With -state-file it keeps its cluster in a file across restarts (pvesim.Snapshot says what
// outlives a restart), as make run does in .run/pvesim/cluster.json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pveflow/pveflow/internal/pvesim"
	"github.com/pveflow/pveflow/internal/pvesim/simserver"
)

// hostTaskDurations are roughly how long the tasks pveflow starts take on a small real host:
// a linked clone on lvmthin, a VM with a few GiB of memory, an ISO of tens of KiB.
var hostTaskDurations = map[string]time.Duration{
	"qmclone":   4 * time.Second,
	"qmstart":   2 * time.Second,
	"qmstop":    time.Second,
	"qmdestroy": 1500 * time.Millisecond,
	"resize":    time.Second,
	"imgcopy":   500 * time.Millisecond,
	"imgdel":    300 * time.Millisecond,
	"hastart":   500 * time.Millisecond,
	"hastop":    500 * time.Millisecond,
}

// hostHARound is about how long PVE's HA manager takes to act on a requested state: its CRM
// and each node's LRM loop every 10 s or so.
const hostHARound = 10 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pvesim:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8006", "loopback `address` to listen on")
	dir := flag.String("dir", ".run/pvesim", "`directory` for ca.pem and the token file")
	tokenUser := flag.String("token-user", simserver.DefaultTokenUser, "API token `id` (user@realm!tokenid) the token file is for")
	authDelay := flag.Duration("auth-delay", 3*time.Second, "how long a 401 is held back, as PVE does")
	resourcesLag := flag.Duration("resources-lag", 10*time.Second, "how often the status cache behind /cluster/resources refreshes: names and statuses lag by up to this")
	bootDelay := flag.Duration("agent-boot-delay", 5*time.Second, "how long a started VM runs before its guest agent answers")
	cloudInit := flag.Duration("cloud-init-duration", 10*time.Second, "how long cloud-init runs on after the guest agent answers before it writes /run/cloud-init/result.json")
	taskScale := flag.Float64("task-scale", 1, "`factor` for task durations and the HA manager's round (1 is a small real host; 0.1 is a quick demo)")
	stallClones := flag.Bool("stall-clones", false, "let every clone task run forever, as a clone stuck on its storage does")
	storageLockHold := flag.Duration("storage-lock-hold", 0, "how long allocating a clone's disk holds its storage's lock; a clone that waits over 10 s for it fails as on PVE (0: no contention)")
	pve82 := flag.Bool("pve82", false, "answer errors like PVE before 8.3: the message only in the reason phrase")
	faultRate := flag.Float64("fault-rate", 0, "`share` of API calls that fail as PVE fails (5xx, 595/596, locks, answers lost or held after the effect), for chaos runs")
	faultSeed := flag.Int64("fault-seed", 1, "`seed` of the random faults")
	stateFilePath := flag.String("state-file", "", "`file` the cluster is kept in across restarts: restored from it at start when it exists, saved to it every second when changed and at shutdown; off when empty")
	stateListen := flag.String("state-listen", "", "loopback `address` serving the cluster's state (VMs, volumes, clone log, faults) as JSON at /state, over plain HTTP; off when empty")
	denyPrivileges := flag.String("deny-privileges", "", "comma-separated `privileges` the token lacks everywhere, such as VM.Clone: calls that need one fail with 403, and pveflow check reports it")
	debug := flag.Bool("debug", false, "log every request")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *taskScale < 0 {
		return errors.New("-task-scale must not be negative")
	}
	if *faultRate < 0 || *faultRate > 1 {
		return errors.New("-fault-rate must be between 0 and 1")
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// Absolute paths, so the printed curl line works from any directory.
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	opts := pvesim.Default()
	opts.TokenUser = *tokenUser
	opts.ResourcesLag = *resourcesLag
	opts.AgentBootDelay = *bootDelay
	opts.CloudInitDuration = *cloudInit
	opts.StallClones = *stallClones
	opts.StorageLockHold = *storageLockHold
	opts.PVE82 = *pve82
	opts.FaultRate, opts.Seed = *faultRate, *faultSeed
	if *denyPrivileges != "" {
		opts.DenyPrivileges = strings.Split(*denyPrivileges, ",")
	}
	opts.TaskDurations = make(map[string]time.Duration, len(hostTaskDurations))
	for typ, d := range hostTaskDurations {
		opts.TaskDurations[typ] = time.Duration(float64(d) * *taskScale)
	}
	opts.HARound = time.Duration(float64(hostHARound) * *taskScale)

	cluster := pvesim.New(opts)
	if *stateFilePath != "" {
		restored, err := loadState(cluster, *stateFilePath)
		if err != nil {
			return err
		}
		if restored {
			fmt.Printf("pvesim restored its cluster from %s (%d VMs)\n", *stateFilePath, len(cluster.VMs()))
		} else {
			fmt.Printf("pvesim starts the default cluster; it keeps it in %s\n", *stateFilePath)
		}
	}
	srv, err := simserver.Start(simserver.Options{
		API:       cluster,
		Addr:      *listen,
		Dir:       absDir,
		TokenUser: *tokenUser,
		AuthDelay: *authDelay,
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	fmt.Printf("pvesim serves the Proxmox VE API at %s/api2/json\n", srv.URL())
	fmt.Printf("  CA file:    %s\n", srv.CAFile())
	fmt.Printf("  token file: %s\n", srv.TokenFile())
	fmt.Printf("try:\n  curl --cacert '%s' -H \"Authorization: PVEAPIToken=$(cat '%s')\" %s/api2/json/version\n",
		srv.CAFile(), srv.TokenFile(), srv.URL())

	if *stateListen != "" {
		url, closeState, err := serveState(cluster, *stateListen, logger)
		if err != nil {
			srv.Close()
			return err
		}
		defer closeState()
		fmt.Printf("pvesim state at %s\n", url)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The last save comes after the server stopped: no call changes the cluster after it.
	saveCtx, stopSaving := context.WithCancel(context.Background())
	saved := make(chan error, 1)
	if *stateFilePath != "" {
		f := &stateFile{cluster: cluster, path: *stateFilePath}
		go func() { saved <- f.keep(saveCtx, logger) }()
	} else {
		saved <- nil
	}
	<-ctx.Done()
	logger.Info("pvesim shutting down")
	closeErr := srv.Close()
	stopSaving()
	if err := <-saved; err != nil {
		return fmt.Errorf("saving the cluster's state to %s: %w", *stateFilePath, err)
	}
	return closeErr
}
