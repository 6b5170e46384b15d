// This file implements finding the daemon: SBX_URL and SBX_API_KEY, else the
// local data directory's socket and admin.key.

package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/internal/sandbox"
)

// Env is the environment Discover reads; nil fields read the process's.
type Env struct {
	Getenv func(string) string
	Euid   int
}

// Discover returns a client of the daemon named by SBX_URL and SBX_API_KEY, or
// else of the local one: <data dir>/sbx.sock with <data dir>/admin.key, where the
// data dir is SBX_DATA_DIR, else /var/lib/sbx as root, else
// $XDG_STATE_HOME/sbx, else ~/.local/state/sbx (as `sbx serve` chooses it).
func Discover(opts ...Option) (*Client, error) {
	return DiscoverEnv(Env{Getenv: os.Getenv, Euid: os.Geteuid()}, opts...)
}

// DiscoverEnv is Discover with the environment handed in.
func DiscoverEnv(env Env, opts ...Option) (*Client, error) {
	getenv := env.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if u := getenv("SBX_URL"); u != "" {
		return New(u, getenv("SBX_API_KEY"), append([]Option{withSource("SBX_URL")}, opts...)...)
	}
	dir := DataDir(getenv, env.Euid)
	sock := filepath.Join(dir, "sbx.sock")
	if _, err := os.Stat(sock); err != nil {
		return nil, &unreachableError{where: "unix:" + sock, source: "the data dir; SBX_URL is not set",
			err: errors.New("no socket there")}
	}
	key := getenv("SBX_API_KEY")
	if key == "" {
		b, err := os.ReadFile(filepath.Join(dir, "admin.key"))
		switch {
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("%w: reading %s: permission denied; run as the user that started `sbx serve`, or set SBX_API_KEY",
				sandbox.ErrUnauthenticated, filepath.Join(dir, "admin.key"))
		case err != nil:
			return nil, fmt.Errorf("%w: reading the API key: %v; set SBX_API_KEY", sandbox.ErrUnauthenticated, err)
		}
		key = strings.TrimSpace(string(b))
	}
	return New("unix:"+sock, key, append([]Option{withSource("the data dir; SBX_URL is not set")}, opts...)...)
}

// DataDir is the local daemon's data directory, as `sbx serve` defaults it.
func DataDir(getenv func(string) string, euid int) string {
	if d := getenv("SBX_DATA_DIR"); d != "" {
		return d
	}
	if euid == 0 {
		return "/var/lib/sbx"
	}
	if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "sbx")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "sbx")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sbx-%d", euid))
}
