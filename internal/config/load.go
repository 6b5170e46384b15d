// This file implements Load: defaults < file (TOML) < environment < flags.

package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"sbx.dev/sbx/internal/sandbox"
)

// ErrUsage marks a mistake in the command line (exit code 2).
var ErrUsage = errors.New("usage")

// Loaded is a resolved configuration and what the command line asked for.
type Loaded struct {
	Config Config
	// File is the configuration file read, if any.
	File string
	// PrintConfig asks to print the resolved configuration and exit.
	PrintConfig bool
}

// Load resolves the configuration from defaults < file < environment < flags.
// args are the arguments after "serve"; getenv reads the environment. The file
// is --config, else $SBX_CONFIG, else none. Load does not Validate. Command-line
// mistakes wrap ErrUsage (flag.ErrHelp for -h).
func Load(args []string, getenv func(string) string) (Loaded, error) {
	return load(args, getenv, os.Geteuid())
}

func load(args []string, getenv func(string) string, euid int) (Loaded, error) {
	fs := newFlagSet()
	var fl struct {
		listen, socket, dataDir, config string
		print                           bool
	}
	fs.StringVar(&fl.listen, "listen", "", "TCP address of the HTTP API (env SBX_LISTEN; default 127.0.0.1:7070)")
	fs.StringVar(&fl.socket, "socket", "", "unix socket of the HTTP API (env SBX_SOCKET; default <data-dir>/sbx.sock)")
	fs.StringVar(&fl.dataDir, "data-dir", "", "data directory (env SBX_DATA_DIR; default /var/lib/sbx as root)")
	fs.StringVar(&fl.config, "config", "", "TOML configuration file (env SBX_CONFIG)")
	fs.BoolVar(&fl.print, "print-config", false, "print the resolved configuration and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Loaded{}, err
		}
		return Loaded{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return Loaded{}, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	out := Loaded{Config: defaults(getenv, euid), PrintConfig: fl.print}
	c := &out.Config

	out.File = getenv("SBX_CONFIG")
	if set["config"] {
		out.File = fl.config
	}
	if out.File != "" {
		if err := c.readFile(out.File); err != nil {
			return Loaded{}, err
		}
	}

	if err := c.applyEnv(getenv); err != nil {
		return Loaded{}, err
	}
	c.allowTemplates()

	if set["listen"] {
		c.Listen = fl.listen
	}
	if set["socket"] {
		c.Socket = fl.socket
	}
	if set["data-dir"] {
		c.DataDir = fl.dataDir
	}
	return out, nil
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sbx serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// Usage writes the flags of `sbx serve` to w.
func Usage(w io.Writer) {
	fs := newFlagSet()
	var s string
	var b bool
	fs.StringVar(&s, "listen", "", "TCP address of the HTTP API (env SBX_LISTEN; default 127.0.0.1:7070)")
	fs.StringVar(&s, "socket", "", "unix socket of the HTTP API (env SBX_SOCKET; default <data-dir>/sbx.sock)")
	fs.StringVar(&s, "data-dir", "", "data directory (env SBX_DATA_DIR; default /var/lib/sbx as root)")
	fs.StringVar(&s, "config", "", "TOML configuration file (env SBX_CONFIG)")
	fs.BoolVar(&b, "print-config", false, "print the resolved configuration and exit")
	fmt.Fprintln(w, "usage: sbx serve [--listen ADDR] [--socket PATH] [--data-dir DIR] [--config FILE] [--print-config]")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// applyEnv applies the SBX_* variables and SANDBOX_BACKEND that are set.
func (c *Config) applyEnv(getenv func(string) string) error {
	var errs []error
	str := func(key string, dst *string) {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	dur := func(key, field string, dst *time.Duration) {
		if v := getenv(key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (from %s): %q is not a duration like 60s", field, key, v))
				return
			}
			*dst = d
		}
	}
	str("SBX_LISTEN", &c.Listen)
	str("SBX_SOCKET", &c.Socket)
	str("SBX_DATA_DIR", &c.DataDir)
	str("SBX_LOG_LEVEL", &c.LogLevel)
	if v := getenv("SANDBOX_BACKEND"); v != "" {
		c.Backends = nil
		for _, b := range strings.Split(v, ",") {
			c.Backends = append(c.Backends, strings.TrimSpace(b))
		}
	}
	if v := getenv("SBX_MAX_CONCURRENT_CREATES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("max_concurrent_creates (from SBX_MAX_CONCURRENT_CREATES): %q is not a number", v))
		}
		c.MaxConcurrentCreates = n
	}
	if v := getenv("SBX_ALLOW_MISSING"); v != "" {
		c.Policy.AllowMissing = nil
		for _, l := range strings.Split(v, ",") {
			if l = strings.TrimSpace(l); l != "" {
				c.Policy.AllowMissing = append(c.Policy.AllowMissing, l)
			}
		}
	}
	if v := getenv("SBX_SECCOMP_PROFILES_DIR"); v != "" {
		c.SeccompProfilesDir = v
	}
	if v := getenv("SBX_SECCOMP_PROFILE"); v != "" {
		c.Policy.SeccompProfile = v
	}
	if v := getenv("SBX_UID_RANGE"); v != "" {
		c.UIDRange = v
	}
	if v := getenv("SBX_POOL_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool_size (from SBX_POOL_SIZE): %q is not a number", v))
		}
		c.PoolSize = n
	}
	dur("SBX_QUEUE_TIMEOUT", "queue_timeout", &c.QueueTimeout)
	dur("SBX_SHUTDOWN_TIMEOUT", "shutdown_timeout", &c.ShutdownTimeout)
	integer64 := func(key, field string, dst *int64) {
		if v := getenv(key); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (from %s): %q is not a whole number", field, key, v))
				return
			}
			*dst = n
		}
	}
	integer := func(key, field string, dst *int) {
		n := int64(*dst)
		integer64(key, field, &n)
		*dst = int(n)
	}
	rate := func(key, field string, dst *float64) {
		if v := getenv(key); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (from %s): %q is not a number like 2.5", field, key, v))
				return
			}
			*dst = f
		}
	}
	integer("SBX_MAX_SANDBOXES", "max_sandboxes", &c.MaxSandboxes)
	str("SBX_LLM_URL", &c.LLM.URL)
	str("SBX_LLM_MODEL", &c.LLM.Model)
	str("SBX_LLM_API_KEY_FILE", &c.LLM.APIKeyFile)
	str("SBX_LLM_API_KEY", &c.LLM.APIKey)
	integer("SBX_MAX_SANDBOXES_PER_KEY", "max_sandboxes_per_key", &c.MaxSandboxesPerKey)
	rate("SBX_CREATE_RATE_PER_KEY", "create_rate_per_key", &c.CreateRatePerKey)
	integer("SBX_CREATE_BURST_PER_KEY", "create_burst_per_key", &c.CreateBurstPerKey)
	rate("SBX_EXEC_RATE_PER_KEY", "exec_rate_per_key", &c.ExecRatePerKey)
	integer("SBX_EXEC_BURST_PER_KEY", "exec_burst_per_key", &c.ExecBurstPerKey)
	dur("SBX_AUDIT_RETENTION", "audit_retention", &c.AuditRetention)
	integer("SBX_AUDIT_MAX_RECORDS", "audit_max_records", &c.AuditMaxRecords)
	integer64("SBX_ARCHIVE_MAX_BYTES", "archive_max_bytes", &c.ArchiveMaxBytes)
	integer64("SBX_ARCHIVE_MAX_ENTRIES", "archive_max_entries", &c.ArchiveMaxEntries)
	list := func(key string, dst *[]string) {
		if v := getenv(key); v != "" {
			*dst = nil
			for _, e := range strings.Split(v, ",") {
				if e = strings.TrimSpace(e); e != "" {
					*dst = append(*dst, e)
				}
			}
		}
	}
	switch v := getenv("SBX_NETWORK"); v {
	case "":
	case "off":
		c.Network.Disabled = true
	case "on":
		c.Network.Disabled = false
	default:
		errs = append(errs, fmt.Errorf("network (from SBX_NETWORK): %q is not on or off", v))
	}
	str("SBX_NETWORK_SUBNET", &c.Network.Subnet)
	list("SBX_NETWORK_NAMESERVERS", &c.Network.Nameservers)
	str("SBX_NETWORK_HOSTS_FILE", &c.Network.HostsFile)
	list("SBX_NETWORK_BLOCK", &c.Network.Block)
	str("SBX_NETWORK_UPSTREAM_CA", &c.Network.UpstreamCAFile)
	var tiers []string
	list("SBX_NETWORKS", &tiers)
	if tiers != nil {
		c.Policy.Networks = nil
		for _, t := range tiers {
			c.Policy.Networks = append(c.Policy.Networks, sandbox.Network(t))
		}
	}
	list("SBX_ALLOWED_ORIGINS", &c.AllowedOrigins)
	c.Preview.applyEnv(getenv)
	c.E2B.applyEnv(getenv)
	errs = append(errs, c.applyTemplatesEnv(getenv))
	c.Local.applyEnv(getenv)
	return errors.Join(errs...)
}

// fileConfig is the TOML form of Config: the policy under [policy], with its
// units in its key names.
type fileConfig struct {
	Config
	Policy filePolicy `toml:"policy"`
}

type filePolicy struct {
	DefaultTTL         time.Duration `toml:"default_ttl"`
	MaxTTL             time.Duration `toml:"max_ttl"`
	DefaultMemoryBytes int64         `toml:"default_memory_bytes"`
	MaxMemoryBytes     int64         `toml:"max_memory_bytes"`
	MinMemoryBytes     int64         `toml:"min_memory_bytes"`
	DefaultMilliCPUs   int64         `toml:"default_milli_cpus"`
	MaxMilliCPUs       int64         `toml:"max_milli_cpus"`
	DefaultPids        int64         `toml:"default_pids"`
	MaxPids            int64         `toml:"max_pids"`
	MinPids            int64         `toml:"min_pids"`
	DefaultDiskBytes   int64         `toml:"default_disk_bytes"`
	MaxDiskBytes       int64         `toml:"max_disk_bytes"`
	MinDiskBytes       int64         `toml:"min_disk_bytes"`
	Networks           []string      `toml:"networks"`
	DefaultExecTimeout time.Duration `toml:"default_exec_timeout"`
	MaxExecTimeout     time.Duration `toml:"max_exec_timeout"`
	OutputLimitBytes   int64         `toml:"output_limit_bytes"`
	Templates          []string      `toml:"templates"`
	RequireLayers      []string      `toml:"require_layers"`
	AllowMissing       []string      `toml:"allow_missing"`
	SeccompProfile     string        `toml:"seccomp_profile"`
	CapProfile         string        `toml:"cap_profile"`
}

func toFile(c Config) fileConfig {
	p := c.Policy
	fp := filePolicy{
		DefaultTTL: p.DefaultTTL, MaxTTL: p.MaxTTL,
		DefaultMemoryBytes: p.DefaultMemoryBytes, MaxMemoryBytes: p.MaxMemoryBytes, MinMemoryBytes: p.MinMemoryBytes,
		DefaultMilliCPUs: p.DefaultMilliCPUs, MaxMilliCPUs: p.MaxMilliCPUs,
		DefaultPids: p.DefaultPids, MaxPids: p.MaxPids, MinPids: p.MinPids,
		DefaultDiskBytes: p.DefaultDiskBytes, MaxDiskBytes: p.MaxDiskBytes, MinDiskBytes: p.MinDiskBytes,
		DefaultExecTimeout: p.DefaultExecTimeout, MaxExecTimeout: p.MaxExecTimeout,
		OutputLimitBytes: p.OutputLimitBytes,
		Templates:        slices.Clone(p.Templates),
		RequireLayers:    slices.Clone(p.RequireLayers),
		AllowMissing:     slices.Clone(p.AllowMissing),
		SeccompProfile:   p.SeccompProfile,
		CapProfile:       p.CapProfile,
	}
	for _, n := range p.Networks {
		fp.Networks = append(fp.Networks, string(n))
	}
	return fileConfig{Config: c, Policy: fp}
}

func (f fileConfig) config() Config {
	c := f.Config
	fp := f.Policy
	c.Policy = sandbox.Policy{
		DefaultTTL: fp.DefaultTTL, MaxTTL: fp.MaxTTL,
		DefaultMemoryBytes: fp.DefaultMemoryBytes, MaxMemoryBytes: fp.MaxMemoryBytes, MinMemoryBytes: fp.MinMemoryBytes,
		DefaultMilliCPUs: fp.DefaultMilliCPUs, MaxMilliCPUs: fp.MaxMilliCPUs,
		DefaultPids: fp.DefaultPids, MaxPids: fp.MaxPids, MinPids: fp.MinPids,
		DefaultDiskBytes: fp.DefaultDiskBytes, MaxDiskBytes: fp.MaxDiskBytes, MinDiskBytes: fp.MinDiskBytes,
		DefaultExecTimeout: fp.DefaultExecTimeout, MaxExecTimeout: fp.MaxExecTimeout,
		OutputLimitBytes: fp.OutputLimitBytes,
		Templates:        fp.Templates,
		RequireLayers:    fp.RequireLayers,
		AllowMissing:     fp.AllowMissing,
		SeccompProfile:   fp.SeccompProfile,
		CapProfile:       fp.CapProfile,
	}
	for _, n := range fp.Networks {
		c.Policy.Networks = append(c.Policy.Networks, sandbox.Network(n))
	}
	return c
}

// readFile overlays the TOML file at path on c. Unknown keys are errors, so a
// misspelt key is not silently ignored.
func (c *Config) readFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading config file: %w", err)
	}
	f := toFile(*c)
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		var keys []string
		for _, k := range und {
			keys = append(keys, k.String())
		}
		return fmt.Errorf("config file %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	*c = f.config()
	c.policyTemplatesSet = c.policyTemplatesSet || md.IsDefined("policy", "templates")
	return nil
}

// TOML returns c as a configuration file, the form --print-config shows.
func (c *Config) TOML() string {
	f := toFile(*c)
	f.Config.Socket = c.SocketPath()
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(f); err != nil {
		return fmt.Sprintf("# encoding the configuration: %v\n", err)
	}
	return buf.String()
}
