// Package agent is the in-sandbox agent: it serves the process, filesystem and sbx
// services of api/agent over the socket its backend hands it. It runs inside the
// sandbox, under every isolation layer, and imports no daemon-side code.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/agent/files"
	"sbx.dev/sbx/internal/agent/process"
	"sbx.dev/sbx/internal/agent/service"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/isolation/nsinit"
	"sbx.dev/sbx/internal/logkey"
)

// Version is reported by Health.
const Version = "sbx-agent/1"

// maxConfig bounds the configuration the agent reads.
const maxConfig = 16 << 20

// Main runs the agent from cfgBytes (boot.AgentConfig.MarshalBinary), or, when it is
// nil, from what it reads on boot.ConfigFD. initLayers are what the init stage
// before it applied, reported with the agent's own. It never returns.
func Main(cfgBytes []byte, initLayers map[string]string) {
	// An idle agent should cost little memory: few threads, a small heap. The
	// backend normally sets this in the environment (boot.RuntimeEnv).
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(16 << 20)
	}

	if cfgBytes == nil {
		f := os.NewFile(boot.ConfigFD, "config")
		b, err := io.ReadAll(io.LimitReader(f, maxConfig))
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sbx agent: reading configuration:", err)
			os.Exit(2)
		}
		cfgBytes = b
	}
	var cfg boot.AgentConfig
	if err := cfg.UnmarshalBinary(cfgBytes); err != nil {
		fmt.Fprintln(os.Stderr, "sbx agent: parsing configuration:", err)
		os.Exit(2)
	}
	if initLayers != nil {
		cfg.Layers = initLayers
	}
	if cfg.ReadyFD > 0 {
		unix.CloseOnExec(cfg.ReadyFD)
	}
	// Inherited descriptors stay with the agent: no child may inherit them.
	for _, fd := range []int{cfg.ListenFD, cfg.CgroupFD, cfg.FreezerFD, cfg.OOMFD, cfg.PidsDirFD, cfg.LogFD} {
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	logOut := os.Stderr
	if cfg.LogFD > 0 {
		logOut = os.NewFile(uintptr(cfg.LogFD), "log")
	}
	log := slog.New(slog.NewJSONHandler(logOut, nil)).With(logkey.Component, "agent", logkey.SandboxID, cfg.SandboxID)
	// Non-dumpable: code in the sandbox (root, but without CAP_SYS_PTRACE) cannot
	// open /proc/1/fd/* and reach the cgroup directory fd the agent holds, whose
	// ".." leads to other sandboxes' groups. Children reset this at execve.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail(cfg, log, "making the agent non-dumpable", err)
	}
	if cfg.Subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fail(cfg, log, "becoming a subreaper", err)
		}
	}
	ln, err := listen(cfg)
	if err != nil {
		fail(cfg, log, "listening", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = Serve(ctx, cfg, ln, log)
	if cfg.Subreaper {
		process.KillDescendants(5 * time.Second) // orphans the trees left behind
	}
	if err != nil {
		log.Error("serving", logkey.Err, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fail reports why the agent cannot start, to the backend waiting on ReadyFD
// and to the log, and exits 1.
func fail(cfg boot.AgentConfig, log *slog.Logger, what string, err error) {
	if cfg.ReadyFD > 0 {
		unix.Write(cfg.ReadyFD, []byte("agent: "+what+": "+err.Error()))
	}
	log.Error(what, logkey.Err, err)
	os.Exit(1)
}

// listen returns the inherited listening socket, or creates one at cfg.Listen.
func listen(cfg boot.AgentConfig) (net.Listener, error) {
	if cfg.ListenFD > 0 {
		f := os.NewFile(uintptr(cfg.ListenFD), "listen")
		defer f.Close() // FileListener dups it
		return net.FileListener(f)
	}
	if cfg.Listen == "" {
		return nil, errors.New("neither listen_fd nor listen is set")
	}
	os.Remove(cfg.Listen) // a stale socket of an earlier agent
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", cfg.Listen)
	syscall.Umask(old)
	return ln, err
}

// Serve serves cfg on ln until ctx ends, then kills every process tree it
// started, waits briefly for them, and returns.
func Serve(ctx context.Context, cfg boot.AgentConfig, ln net.Listener, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	// notServing tells the backend waiting on ReadyFD why the agent cannot
	// serve, and returns err.
	notServing := func(what string, err error) error {
		ln.Close()
		if cfg.ReadyFD > 0 {
			unix.Write(cfg.ReadyFD, []byte("agent: "+what+err.Error()))
			unix.Close(cfg.ReadyFD)
		}
		return err
	}
	tree, err := files.New(cfg.Root, cfg.Workdir)
	if err != nil {
		return notServing("", err)
	}
	defer tree.Close()
	nsinit.Mark("files")
	conf, report := newConfinement(cfg)
	nsinit.Mark("ruleset")
	pidsJoin, pidsEvents, err := workPids(cfg)
	if err != nil {
		return notServing("the work pids group: ", err)
	}
	outDir := cfg.OutputDir
	if outDir == "" {
		outDir = "/tmp/sbx-output"
	}
	table := process.NewTable(process.Config{
		OutputLimitBytes: cfg.OutputLimitBytes,
		SpillLimitBytes:  cfg.SpillLimitBytes,
		CgroupFD:         cfg.CgroupFD,
		FreezerFD:        cfg.FreezerFD,
		OOMFD:            cfg.OOMFD,
		PidsFD:           pidsEvents,
		PidsJoinFD:       pidsJoin,
		DiskFull:         func() bool { return diskFull(tree, outDir) },
		Confine:          conf.hook(),
		Spill:            func(name string) (*os.File, string, error) { return tree.CreateSpill(outDir, name) },
		Log:              log,
	})
	defer table.Close()
	nsinit.Mark("table")
	if err := conf.prove(&report); err != nil {
		return notServing("confining processes: ", err)
	}
	nsinit.Mark("confinement")
	srv := service.New(service.Config{Version: Version, Env: cfg.Env, Log: log, WarmUp: sync.OnceFunc(warmUp),
		Archive: files.ArchiveLimits{MaxBytes: cfg.ArchiveMaxBytes, MaxEntries: cfg.ArchiveMaxEntries}}, table, tree)
	defer srv.Close()
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	var act activity
	hs := &http.Server{
		Handler:           act.track(srv.Handler()),
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if cfg.ReadyFD > 0 { // connections wait in the listen backlog until Serve accepts
		nsinit.Mark("serve")
		report.Marks = nsinit.Marks()
		if len(report.Layers) > 0 {
			if b, err := report.MarshalBinary(); err == nil {
				unix.Write(cfg.ReadyFD, append([]byte(boot.ReadyPrefix), b...))
			}
		}
		unix.Close(cfg.ReadyFD)
	}
	// The warm-up waits for a quiet moment: a sandbox used at once (no
	// pool) serves its first requests without sharing its one P with it.
	// The daemon's pool asks for the whole of it, a first process included
	// (a Health call asking for warm: Server.Warm).
	go act.whenIdle(warmIdle, srv.WarmAgent)
	log.Info("serving", "pid", os.Getpid(), "tree_kill", table.TreeKill())
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			table.KillAll()
			return err
		}
	}
	table.KillAll()
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	table.WaitAll(wctx)
	cancel()
	hs.Close()
	log.Info("stopped")
	return nil
}

// workPids returns the fds of the group whose pids limit the processes the
// agent starts count against: its directory, for the thread they are forked
// from to join (v1), and its pids.events; -1 for none. On a v1 host it makes
// that group under the sandbox's pids group (cfg.PidsDirFD), limited to
// cfg.WorkPids. On a pure v2 host the daemon made and limited it: it is the
// work leaf, cfg.CgroupFD, and the processes are born in groups under it.
func workPids(cfg boot.AgentConfig) (dir, events int, err error) {
	if cfg.PidsDirFD <= 0 {
		if cfg.CgroupFD <= 0 {
			return -1, -1, nil
		}
		events, err := unix.Openat(cfg.CgroupFD, "pids.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) { // no pids controller there (hybrid: it is v1's)
			return -1, -1, nil
		}
		if err != nil {
			return -1, -1, fmt.Errorf("opening pids.events: %w", err)
		}
		return -1, events, nil
	}
	const name = cgroup.WorkGroup
	if err := unix.Mkdirat(cfg.PidsDirFD, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, -1, fmt.Errorf("mkdir %s: %w", name, err)
	}
	dir, err = unix.Openat(cfg.PidsDirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("opening %s: %w", name, err)
	}
	if cfg.WorkPids > 0 {
		if err := cgroup.WriteFileAt(dir, "pids.max", strconv.FormatInt(cfg.WorkPids, 10)); err != nil {
			unix.Close(dir)
			return -1, -1, err
		}
	}
	events, err = unix.Openat(dir, "pids.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(dir)
		return -1, -1, fmt.Errorf("opening %s/pids.events: %w", name, err)
	}
	return dir, events, nil
}

// diskFull reports whether the sandbox's disk is full: a 4 KiB write to a
// new file of the output directory fails with ENOSPC or EDQUOT. It is asked
// only when a process fails.
func diskFull(tree *files.FS, dir string) bool {
	f, wire, err := tree.CreateSpill(dir, ".sbx-disk-probe")
	if err != nil {
		return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
	}
	defer func() {
		f.Close()
		tree.Remove(wire)
	}()
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
