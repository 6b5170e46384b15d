// This file implements a fake cgroup root for tests of hosts this machine is not.

package cgroup

import (
	"os"
	"path/filepath"
	"strings"
)

// fakeFiles are the interface files a fake group directory starts with.
var fakeFiles = map[string]string{
	"cgroup.procs": "", "cgroup.threads": "", "cgroup.kill": "", "cgroup.events": "populated 0\nfrozen 0\n",
	"cgroup.controllers": "cpu memory pids\n", "cgroup.subtree_control": "",
	"memory.max": "max\n", "memory.swap.max": "max\n", "memory.current": "0\n", "memory.peak": "0\n",
	"memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "pids.max": "max\n",
	"pids.current": "0\n", "cpu.max": "max 100000\n", "cpu.stat": "usage_usec 0\n",
}

// NewFakeV2 returns a pure v2 layout rooted at dir, a plain directory: groups are
// directories holding regular files named as cgroupfs names them. It is for
// tests of the v2 code path on hosts without a v2 hierarchy.
func NewFakeV2(dir string) (*Layout, error) {
	if err := populateFake(dir); err != nil {
		return nil, err
	}
	return &Layout{V1: map[string]string{}, V2: dir, V2Controllers: []string{"cpu", "memory", "pids"}, fake: true}, nil
}

func populateFake(dir string) error {
	for name, val := range fakeFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readFake reads a file of a fake layout, trimmed.
func readFake(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}
