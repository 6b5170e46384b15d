// Package daemon is sbx's composition root: configuration, store, drivers, manager
// and servers, wired together for `sbx serve`.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/builtin"
	"sbx.dev/sbx/internal/config"
	"sbx.dev/sbx/internal/fault"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/network"
	"sbx.dev/sbx/internal/server/e2bapi"
	"sbx.dev/sbx/internal/server/httpapi"
	"sbx.dev/sbx/internal/server/mcpserver"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/timerslack"
	"sbx.dev/sbx/internal/tools"
	"sbx.dev/sbx/internal/tools/repl"
)

// Main runs `sbx serve` with args (after "serve") until ctx ends; it returns an exit code.
func Main(ctx context.Context, args []string) int {
	return run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
}

// run is Main with its environment and output handed in.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	loaded, err := config.Load(args, getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		config.Usage(stdout)
		return 0
	case errors.Is(err, config.ErrUsage):
		fmt.Fprintf(stderr, "sbx serve: %v\n", strings.TrimPrefix(err.Error(), config.ErrUsage.Error()+": "))
		config.Usage(stderr)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "sbx serve: %v\n", err)
		return 2
	}
	cfg := loaded.Config
	if err := cfg.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "sbx serve: config: %s\n", line)
		}
		return 2
	}
	if loaded.PrintConfig {
		fmt.Fprint(stdout, cfg.TOML())
		return 0
	}
	if err := loadSeccompProfiles(cfg.SeccompProfilesDir, cfg.Policy.SeccompProfile); err != nil {
		fmt.Fprintf(stderr, "sbx serve: config: %v\n", err)
		return 2
	}
	if err := serve(ctx, cfg, newLogger(stderr, cfg.LogLevel), stdout); err != nil {
		fmt.Fprintf(stderr, "sbx serve: %v\n", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level)) // validated by config
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// serve runs the daemon on cfg until ctx ends. base is the logger every part
// derives its own from, each adding its component; the daemon's own lines say
// component=daemon.
func serve(ctx context.Context, cfg config.Config, base *slog.Logger, stdout io.Writer) (retErr error) {
	log := base.With(logkey.Component, "daemon")
	timerslack.Coarsen() // the spawner, and through it every agent, inherit it
	narrowProcs()
	dir := cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("securing data directory: %w", err)
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	defer unlock()

	st, err := store.Open(ctx, filepath.Join(dir, "sbx.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	keyPath, err := ensureAdminKey(ctx, st, dir, log)
	if err != nil {
		return err
	}
	instance, err := ensureInstance(dir)
	if err != nil {
		return err
	}
	previewSecret, err := ensurePreviewKey(dir, log)
	if err != nil {
		return err
	}
	secretBox, err := openSecretBox(dir, log)
	if err != nil {
		return err
	}
	base = base.With("instance", instance)
	log = base.With(logkey.Component, "daemon")

	netSvc, err := openNetwork(cfg, base)
	if err != nil {
		return err
	}
	defer func() {
		// The router namespace stays while sandboxes use it (the next
		// daemon adopts them), and goes when none does.
		if err := netSvc.Close(true); err != nil {
			log.Warn("closing the egress network", logkey.Err, err)
		}
	}()
	drivers, unopened := openDrivers(ctx, cfg, instance, base, netSvc)
	for _, u := range unopened {
		if errors.Is(u.Err, backend.ErrRefused) {
			return fmt.Errorf("backend %s: %w", u.Name, u.Err)
		}
	}
	m, err := manager.New(ctx, manager.Options{
		Store:                st,
		Drivers:              drivers,
		Unopened:             unopened,
		Policy:               cfg.Policy,
		Log:                  base,
		Now:                  fault.Wall,
		MaxConcurrentCreates: cfg.MaxConcurrentCreates,
		Cores:                config.Cores,
		PoolSize:             cfg.PoolSize,
		QueueTimeout:         cfg.QueueTimeout,
		Limits: manager.Limits{
			MaxSandboxes:       cfg.MaxSandboxes,
			MaxSandboxesPerKey: cfg.MaxSandboxesPerKey,
			CreateRate:         cfg.CreateRatePerKey,
			CreateBurst:        cfg.CreateBurstPerKey,
			ExecRate:           cfg.ExecRatePerKey,
			ExecBurst:          cfg.ExecBurstPerKey,
		},
		AuditRetention:  cfg.AuditRetention,
		AuditMaxRecords: cfg.AuditMaxRecords,
		Network:         managerNetwork(netSvc),
		PreviewSecret:   previewSecret,
		SecretBox:       secretBox,
		ProxySecrets:    proxySecrets(netSvc),
	})
	if err != nil {
		return err
	}
	began := time.Now()
	if err := m.Recover(ctx); err != nil {
		m.Close(context.Background())
		return err
	}
	log.Info("recovered sandboxes from the store", logkey.Duration, time.Since(began))

	tcp, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		m.Close(context.Background())
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	sockPath := cfg.SocketPath()
	unix, err := listenUnix(sockPath)
	if err != nil {
		tcp.Close()
		m.Close(context.Background())
		return err
	}
	defer os.Remove(sockPath)

	// Headers must arrive within ReadHeaderTimeout and an idle keep-alive
	// connection goes after IdleTimeout. Bodies are held to a minimum rate by
	// the API itself (httpapi's bodyrate.go); there is no ReadTimeout or
	// WriteTimeout, which would cut multi-GB uploads and downloads and exec
	// output that streams for as long as the command runs.
	// One tool set, served at /v1/tools and, over MCP, at /mcp.
	set := tools.New(m, tools.Options{LLM: repl.LLM{URL: cfg.LLM.URL, Model: cfg.LLM.Model, APIKey: cfg.LLM.APIKey}})
	mcpSrv := mcpserver.New(set, m, mcpserver.Options{Log: base})
	e2b := e2bapi.New(m, e2bapi.Options{Log: base, Domain: cfg.Preview.Domain, CodeInterpreter: set, ClientID: instance})
	api := httpapi.New(m, httpapi.Options{Log: base, Tools: set, MCP: mcpSrv.Handler(), E2B: e2b, AllowedOrigins: cfg.AllowedOrigins,
		Preview: httpapi.PreviewOptions{Domain: cfg.Preview.Domain, Scheme: cfg.Preview.Scheme,
			PublicURL: cfg.Preview.PublicURL, Listen: tcp.Addr().String()}})
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 2)
	for _, l := range []net.Listener{tcp, unix} {
		go func() { serveErr <- srv.Serve(l) }()
	}
	fmt.Fprintf(stdout, "sbx listening on http://%s and unix:%s\n", tcp.Addr(), sockPath)
	fmt.Fprintf(stdout, "admin API key: %s\n", keyPath)
	log.Info("serving", "listen", tcp.Addr().String(), "socket", sockPath, "backends", strings.Join(cfg.Backends, ","),
		"gomaxprocs", runtime.GOMAXPROCS(0))

	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
	case err := <-serveErr:
		failed = fmt.Errorf("serving: %w", err)
		log.Error("serving failed; shutting down", logkey.Err, err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	// MCP sessions end as the listeners close: their event streams are
	// requests Shutdown would wait for, and their sandboxes are deleted while
	// the manager still runs.
	srv.RegisterOnShutdown(func() { mcpSrv.Close(sctx) })
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests did not finish in time", logkey.Err, err)
		srv.Close()
	}
	if err := httpapi.CloseTerminals(sctx, api); err != nil {
		log.Warn("terminals did not end in time", logkey.Err, err)
	}
	if err := mcpSrv.Close(sctx); err != nil {
		log.Warn("ending MCP sessions", logkey.Err, err)
	}
	if err := m.Close(sctx); err != nil {
		log.Warn("closing the manager", logkey.Err, err)
	}
	log.Info("stopped; sandboxes keep running")
	return failed
}

// openDrivers opens each configured backend; one that fails is logged and
// reported unopened, so health shows why.
func openDrivers(ctx context.Context, cfg config.Config, instance string, base *slog.Logger, netSvc *network.Service) ([]manager.NamedDriver, []manager.UnopenedDriver) {
	log := base.With(logkey.Component, "daemon")
	builtin.Register()
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		log.Error("resolving the sbx executable", logkey.Err, err)
	}
	var (
		drivers  []manager.NamedDriver
		unopened []manager.UnopenedDriver
	)
	for _, name := range cfg.Backends {
		open, ok := backend.Lookup(name)
		if !ok {
			err := fmt.Errorf("no such backend (known: %s)", strings.Join(backend.Names(), ", "))
			log.Error("opening backend", logkey.Backend, name, logkey.Err, err)
			unopened = append(unopened, manager.UnopenedDriver{Name: name, Err: err})
			continue
		}
		dataDir := filepath.Join(cfg.DataDir, "backends", name)
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			log.Error("opening backend", logkey.Backend, name, logkey.Err, err)
			unopened = append(unopened, manager.UnopenedDriver{Name: name, Err: err})
			continue
		}
		d, err := open(ctx, backend.Options{
			DataDir:           dataDir,
			Instance:          instance,
			Exe:               exe,
			Log:               base.With(logkey.Backend, name),
			OutputLimitBytes:  cfg.OutputLimitBytes,
			SpillLimitBytes:   cfg.SpillLimitBytes,
			ArchiveMaxBytes:   cfg.ArchiveMaxBytes,
			ArchiveMaxEntries: cfg.ArchiveMaxEntries,
			UIDRange:          cfg.UIDRange,
			Network:           backendNetwork(netSvc),
			E2B: backend.E2BRemote{URL: cfg.E2B.URL, SandboxURL: cfg.E2B.SandboxURL, APIKey: cfg.E2B.APIKey,
				Template: cfg.E2B.Template},
			Templates: templateDirs(cfg.Templates),
			GitRepos:  cfg.Local.GitRepos,
		})
		if err != nil {
			log.Error("opening backend", logkey.Backend, name, logkey.Err, err)
			unopened = append(unopened, manager.UnopenedDriver{Name: name, Err: err})
			continue
		}
		drivers = append(drivers, manager.NamedDriver{Name: name, Driver: d})
	}
	return drivers, unopened
}

// listenUnix listens on a unix socket at path, mode 0600, replacing a stale one
// (the data-dir lock is held, so no live daemon of ours owns it).
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating socket directory: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on unix:%s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("securing socket: %w", err)
	}
	return l, nil
}

// templateDirs are the configured templates' root directories by name.
func templateDirs(ts map[string]config.Template) map[string]string {
	dirs := make(map[string]string, len(ts))
	for name, t := range ts {
		dirs[name] = t.Rootfs
	}
	return dirs
}

// daemonProcs is the daemon's GOMAXPROCS on a host of cores: a quarter of
// them, at least one, about the daemon's share of a sandbox's CPU (3.6 of
// 13.5 ms per create+exec+destroy on a two-core VM: the sandbox's own
// processes take most of the rest). A P the daemon's goroutines cannot keep
// busy costs it anyway: the runtime wakes an idle thread on another CPU
// for each goroutine made runnable, which finds nothing and sleeps again.
// With one P instead of two, the daemon's CPU per cycle fell 15-18%.
func daemonProcs(cores int) int { return max(1, (cores+3)/4) }

// narrowProcs sets the daemon's GOMAXPROCS to daemonProcs of the host's
// cores, unless the operator set GOMAXPROCS.
func narrowProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(daemonProcs(config.Cores))
	}
}
