// This file implements FS-12 of the attack catalogue (SECURITY.md §5):
// hostile directory templates. The row builds template roots from the
// host's own sh, cat and ls, starts a private daemon naming them, and
// creates sandboxes of each through the API: a good one (the control: its
// files are the sandbox's root), one whose /dev, /proc, /tmp and /workspace
// are links to host paths, one whose /dev/null is a link to core_pattern,
// whose /proc is filled and whose /etc/hostname and /etc/hosts are links to
// a host file, and one whose /etc is a link to a host directory. Each is
// refused naming the path, or confined; the far end is the host:
// core_pattern, /dev, the canary directory and file behind the links, and
// the template roots themselves, compared before and after.

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// fs12Marker is a file only the templates' roots hold.
const fs12Marker = "sbx-fs12-marker"

// fs12Templates are the row's templates, by name, as the daemon knows them.
var fs12Templates = []string{"fs12-good", "fs12-links", "fs12-planted", "fs12-etc-link"}

// fs12Root makes a template root of the host's sh, cat and ls under dir,
// with the marker and an /etc of its own.
func fs12Root(r *run, dir string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	testutil.MiniRoot(r.t, dir, "/bin/sh", "/bin/cat", "/bin/ls")
	for path, content := range map[string]string{
		fs12Marker:     "the template's own file\n",
		"etc/passwd":   "root:x:0:0:fs12 template root:/root:/bin/sh\n",
		"etc/hostname": "fs12-template\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	return dir
}

// fs12Tree lists every path under dir with its type, size and link target:
// what a template root or the canary directory holds.
func fs12Tree(dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			out = append(out, fmt.Sprintf("%s error %v", p, err))
			return nil
		}
		line := fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, dir), fi.Mode(), fi.Size())
		if fi.Mode()&os.ModeSymlink != 0 {
			t, _ := os.Readlink(p)
			line += " -> " + t
		}
		out = append(out, line)
		return nil
	})
	return out
}

// fs12Dev lists the host's /dev: names, with each device's numbers.
func fs12Dev() map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir("/dev")
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Lstat("/dev/"+e.Name(), &st); err == nil {
			out[e.Name()] = fmt.Sprintf("%o %d", st.Mode, st.Rdev)
		}
	}
	return out
}

func fs12Setup(r *run) error {
	if r.backend != backendNative {
		r.skip("directory templates are native's")
		return nil
	}
	base, err := os.MkdirTemp("", "sbx-fs12-")
	if err != nil {
		return err
	}
	r.t.Cleanup(func() { os.RemoveAll(base) })
	canaryDir := filepath.Join(base, "canary")
	os.Mkdir(canaryDir, 0o755)
	canary := filepath.Join(canaryDir, "canary.txt")
	if err := os.WriteFile(canary, []byte("fs12 canary\n"), 0o644); err != nil {
		return err
	}
	good := fs12Root(r, filepath.Join(base, "good"))
	links := fs12Root(r, filepath.Join(base, "links"))
	for name, target := range map[string]string{"dev": "/dev", "proc": "/proc", "tmp": canaryDir,
		"workspace": strings.Repeat("../", 8) + strings.TrimPrefix(canaryDir, "/")} {
		os.RemoveAll(filepath.Join(links, name))
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			return err
		}
	}
	planted := fs12Root(r, filepath.Join(base, "planted"))
	os.MkdirAll(filepath.Join(planted, "dev"), 0o755)
	os.MkdirAll(filepath.Join(planted, "proc", "sys", "kernel"), 0o755)
	for _, err := range []error{
		os.Symlink("/proc/sys/kernel/core_pattern", filepath.Join(planted, "dev", "null")),
		os.WriteFile(filepath.Join(planted, "proc", "kcore"), []byte("planted kcore\n"), 0o644),
		os.WriteFile(filepath.Join(planted, "proc", "sys", "kernel", "core_pattern"), []byte("planted\n"), 0o644),
		os.Remove(filepath.Join(planted, "etc", "hostname")),
		os.Symlink(canary, filepath.Join(planted, "etc", "hostname")),
		os.Symlink(canary, filepath.Join(planted, "etc", "hosts")),
	} {
		if err != nil {
			return err
		}
	}
	etcLink := fs12Root(r, filepath.Join(base, "etc-link"))
	os.RemoveAll(filepath.Join(etcLink, "etc"))
	if err := os.Symlink(canaryDir, filepath.Join(etcLink, "etc")); err != nil {
		return err
	}
	roots := []string{good, links, planted, etcLink}
	var env []string
	for i, name := range fs12Templates {
		env = append(env, name+"="+roots[i])
	}
	r.set("canary_dir", canaryDir)
	r.set("canary", canary)
	r.set("roots", strings.Join(roots, "\n"))
	r.set("core_pattern", readTrim("/proc/sys/kernel/core_pattern"))
	for i, root := range roots {
		r.set("tree "+fs12Templates[i], strings.Join(fs12Tree(root), "\n"))
	}
	r.set("canary_tree", strings.Join(fs12Tree(canaryDir), "\n"))
	dev, _ := json.Marshal(fs12Dev())
	r.set("dev", string(dev))
	r.forbidden = append(r.forbidden, base)
	// A warm pool of one: its sandbox is the default template's (host), and
	// must not serve the control's create of a directory template.
	d, _ := r.privateDaemon(nil, "SBX_TEMPLATES="+strings.Join(env, ","), "SBX_POOL_SIZE=1")
	warm := waitUntil(time.Minute, func() bool {
		_, b := d.apiQuiet("GET", "/v1/health", nil)
		var h struct{ Pool *struct{ Ready int } }
		return json.Unmarshal(b, &h) == nil && h.Pool != nil && h.Pool.Ready == 1
	})
	if !warm {
		return fmt.Errorf("the private daemon's warm pool did not fill within a minute")
	}
	return nil
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// fs12Create creates a sandbox of template on the row's daemon, returning
// its id, or the status and body of a refusal.
func fs12Create(r *run, template string) (id string, status int, body []byte) {
	d := r.priv()
	st, _, b := r.call(d, d.key, "POST", "/v1/sandboxes", map[string]any{"template": template}, nil)
	if st != 201 {
		return "", st, b
	}
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	r.set("created", strings.TrimSpace(r.get("created")+"\n"+sb.ID))
	return sb.ID, st, b
}

// fs12Sh runs a shell command in sandbox id of the row's daemon.
func fs12Sh(r *run, id, command string) (execResult, error) {
	d := r.priv()
	return r.execAs(d, d.key, id, map[string]any{"command": command, "timeout": 60})
}

// fs12Probe is what the hostile templates' sandboxes run: what they see at
// the paths the template linked, and writes through each.
const fs12Probe = `
echo dev=$(ls /dev)
echo tmp=$(ls -A /tmp)
echo workspace=$(ls -A /workspace)
echo comm=$(cat /proc/self/comm)
echo kcore=$(cat /proc/kcore 2>&1)
echo etc_hostname=$(cat /etc/hostname)
echo '|/tmp/fs12-pwn %p' > /dev/null && echo devnull=written
(echo fs12-pwn > /dev/fs12-pwn) 2>/dev/null && echo devnode=made
echo fs12-pwn > /tmp/fs12-pwn && echo tmp_write=ok
echo fs12-pwn > /workspace/fs12-pwn && echo workspace_write=ok
(echo fs12-pwn > /etc/hostname; echo fs12-pwn > /etc/hosts) 2>/dev/null && echo etc_write=ok
(echo '|/tmp/fs12-pwn %p' > /proc/sys/kernel/core_pattern) 2>/dev/null && echo core_pattern=written
true
`

// devList is a fresh sandbox's /dev, as ls lists it.
const devList = "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero"

func fs12Control(r *run) error {
	id, st, b := fs12Create(r, "fs12-good")
	if id == "" {
		return fmt.Errorf("control: create of template fs12-good = %d %.300s", st, b)
	}
	res, err := fs12Sh(r, id, "cat /"+fs12Marker+" /etc/hostname /etc/passwd; echo usr_bin=$(ls /usr/bin); echo dev=$(ls /dev)")
	if err != nil {
		return fmt.Errorf("control: %v", err)
	}
	want := "the template's own file\n" + id + "\nroot:x:0:0:fs12 template root:/root:/bin/sh\n"
	if !strings.HasPrefix(res.Stdout, want) || res.ExitCode != 0 {
		return fmt.Errorf("control: the template's files and the sandbox's hostname inside = %+v; want %q first", res, want)
	}
	// Its root is the template's, not the warm pool's host sandbox: /usr/bin
	// holds the three programs (and sh's target), not the host's thousands.
	for _, l := range strings.Split(res.Stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "usr_bin="); ok && len(strings.Fields(v)) > 5 {
			return fmt.Errorf("control: /usr/bin inside lists %d programs; want the template's few", len(strings.Fields(v)))
		}
		if v, ok := strings.CutPrefix(l, "dev="); ok && v != devList {
			return fmt.Errorf("control: /dev inside = %q, want %q", v, devList)
		}
	}
	// The daemon names them in its health: host first, then each template.
	var h struct {
		Backends []struct {
			Name      string
			Templates []string
		}
	}
	_, hb := r.priv().apiQuiet("GET", "/v1/health", nil)
	if json.Unmarshal(hb, &h) != nil || len(h.Backends) == 0 || !slices.Equal(h.Backends[0].Templates, append([]string{"host"}, slices.Sorted(slices.Values(fs12Templates))...)) {
		return fmt.Errorf("control: GET /v1/health lists %.300s; want host and the row's templates", hb)
	}
	var sb struct {
		Template  string
		Isolation struct{ Level string }
	}
	_, gb := r.priv().apiQuiet("GET", "/v1/sandboxes/"+id, nil)
	if json.Unmarshal(gb, &sb); sb.Template != "fs12-good" || sb.Isolation.Level != "native" {
		return fmt.Errorf("control: the sandbox reads template %q at level %q; want fs12-good at native: %.300s", sb.Template, sb.Isolation.Level, gb)
	}
	return nil
}

func fs12Attack(r *run) error {
	// Links at /dev, /proc, /tmp, /workspace, and a planted /dev/null,
	// /proc and /etc: confined, each sandbox seeing its own.
	for _, tmpl := range []string{"fs12-links", "fs12-planted"} {
		id, st, b := fs12Create(r, tmpl)
		if id == "" {
			if st != 400 || !strings.Contains(string(b), tmpl) {
				r.breach("create of template %s = %d %.300s: neither confined nor refused naming it", tmpl, st, b)
			}
			r.note("%s refused: %.200s", tmpl, b)
			continue
		}
		res, err := fs12Sh(r, id, fs12Probe)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, l := range strings.Split(res.Stdout, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				got[k] = v
			}
		}
		want := map[string]string{"dev": devList, "tmp": "", "workspace": "", "comm": "cat", "etc_hostname": id,
			"devnull": "written", "tmp_write": "ok", "workspace_write": "ok", "etc_write": "ok"}
		for k, v := range want {
			if got[k] != v {
				r.breach("%s: inside, %s = %q; want %q (the sandbox's own)", tmpl, k, got[k], v)
			}
		}
		for _, k := range []string{"devnode", "core_pattern"} {
			if got[k] != "" {
				r.breach("%s: inside, %s = %q", tmpl, k, got[k])
			}
		}
		if strings.Contains(got["kcore"], "planted") {
			r.breach("%s: /proc/kcore inside reads the template's planted file", tmpl)
		}
	}
	// /etc a link to a host directory: refused, naming /etc.
	id, st, b := fs12Create(r, "fs12-etc-link")
	switch {
	case id != "":
		res, _ := fs12Sh(r, id, "ls -A /etc; echo fs12-pwn > /etc/fs12-pwn")
		r.breach("template fs12-etc-link was created (%s); /etc inside lists %q", id, res.Stdout)
	case st != 400 || !strings.Contains(string(b), "fs12-etc-link") || !strings.Contains(string(b), "/etc"):
		r.breach("create of template fs12-etc-link = %d %.300s; want 400 naming the template and /etc", st, b)
	}
	// An unknown template: 400 naming it and the known ones.
	if id, st, b := fs12Create(r, "fs12-nope"); id != "" || st != 400 || !strings.Contains(string(b), "fs12-nope") || !strings.Contains(string(b), "fs12-good") {
		r.breach("create of unknown template fs12-nope = %d %.300s; want 400 naming it and the known ones", st, b)
	}
	return nil
}

func fs12Evidence(r *run) error {
	if now := readTrim("/proc/sys/kernel/core_pattern"); now != r.get("core_pattern") {
		r.breach("host core_pattern changed: %q -> %q", r.get("core_pattern"), now)
	}
	var was map[string]string
	json.Unmarshal([]byte(r.get("dev")), &was)
	now := fs12Dev()
	var added []string
	for name, v := range now {
		if old, ok := was[name]; ok && old != v {
			r.breach("host /dev/%s changed: %s -> %s", name, old, v)
		}
		if _, ok := was[name]; !ok && !strings.HasPrefix(name, "loop") { // the daemons' disk pools take loop devices
			added = append(added, name)
		}
	}
	sort.Strings(added)
	if len(added) > 0 {
		r.breach("host /dev gained %v", added)
	}
	if _, err := os.Lstat("/dev/fs12-pwn"); err == nil {
		r.breach("host /dev/fs12-pwn exists")
	}
	if got := strings.Join(fs12Tree(r.get("canary_dir")), "\n"); got != r.get("canary_tree") {
		r.breach("the canary directory behind the templates' links changed:\n%s\nwas\n%s", got, r.get("canary_tree"))
	}
	if b, _ := os.ReadFile(r.get("canary")); string(b) != "fs12 canary\n" {
		r.breach("the canary file behind /etc/hostname reads %q", b)
	}
	roots := strings.Split(r.get("roots"), "\n")
	for i, name := range fs12Templates {
		if got := strings.Join(fs12Tree(roots[i]), "\n"); got != r.get("tree "+name) {
			r.breach("template %s's root changed on the host", name)
		}
	}
	// The refused creates left no sandbox: the daemon holds those created.
	ids, created := idsOn(r.priv()), strings.Fields(r.get("created"))
	slices.Sort(ids)
	slices.Sort(created)
	if !slices.Equal(ids, created) {
		r.breach("the daemon lists sandboxes %v; the row created %v", ids, created)
	}
	return nil
}
