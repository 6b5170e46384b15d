package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// templateMarker is a file only the test templates' roots hold.
const templateMarker = "sbx-template-marker"

// miniTemplate makes a template root of the host's sh, cat and ls, with a
// marker file and an /etc/passwd of its own, and returns it.
func miniTemplate(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	testutil.MiniRoot(t, dir, "/bin/sh", "/bin/cat", "/bin/ls")
	for path, content := range map[string]string{
		templateMarker: "from the template\n",
		"etc/passwd":   "root:x:0:0:template root:/root:/bin/sh\n",
		"etc/hostname": "template-hostname\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// snapshot lists every path under dir with its size and mode, to compare a
// template's root before and after its sandboxes ran.
func snapshot(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, dir), fi.Mode(), fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenRefusesBadTemplate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct{ name, dir string }{
		{"missing", "/nonexistent/sbx-template"},
		{"relative", "rel/root"},
		{"file", file},
		{"host", t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireJail(t)
			opts := backend.Options{DataDir: t.TempDir(), Instance: fmt.Sprintf("r%d", time.Now().UnixNano()%1e9),
				Exe: os.Args[0], Log: testutil.Logger(t), Templates: map[string]string{tc.name: tc.dir}}
			d, err := open(t.Context(), opts)
			if err == nil {
				d.pool.Close()
				t.Fatalf("open with template %s = %s: succeeded, want a refusal", tc.name, tc.dir)
			}
			if !errors.Is(err, backend.ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
				t.Errorf("open with template %s = %s: %v; want ErrRefused naming it", tc.name, tc.dir, err)
			}
		})
	}
}

// TestTemplateLookup: an unknown template names the known ones; a
// template whose /etc is a link is refused before anything is made (the
// audit checks); the real top-level directories of a root are what its
// sandboxes may write besides the common places.
func TestTemplateLookup(t *testing.T) {
	good := miniTemplate(t)
	etcLink := miniTemplate(t)
	canary := t.TempDir()
	os.RemoveAll(filepath.Join(etcLink, "etc"))
	if err := os.Symlink(canary, filepath.Join(etcLink, "etc")); err != nil {
		t.Fatal(err)
	}
	etcFile := miniTemplate(t)
	os.RemoveAll(filepath.Join(etcFile, "etc"))
	os.WriteFile(filepath.Join(etcFile, "etc"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(good, "lib32"), 0o755) // a real directory beside the host's links
	d, _ := openTestWith(t, func(o *backend.Options) {
		o.Templates = map[string]string{"mini": good, "etc-link": etcLink, "etc-file": etcFile}
	}, "/bin/sh", "-c", "true")
	if rep, err := d.Probe(t.Context()); err != nil || !slices.Equal(rep.Templates, []string{"host", "etc-file", "etc-link", "mini"}) {
		t.Errorf("Probe lists templates %q, %v; want host first, then the directory templates by name", rep.Templates, err)
	}

	for _, tc := range []struct{ template, want string }{
		{"ubuntu", `template "ubuntu" not found (known: host, etc-file, etc-link, mini)`},
		{"etc-link", `template "etc-link": its /etc is a symlink or not a directory`},
		{"etc-file", `template "etc-file": its /etc is a symlink or not a directory`},
	} {
		id := sandbox.NewID()
		sp := spec(id)
		sp.Template = tc.template
		_, err := d.Start(t.Context(), sp)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(template %s) = %v; want ErrInvalid saying %s", tc.template, err, tc.want)
		}
		if err := d.Destroy(t.Context(), id); err != nil {
			t.Errorf("Destroy after a refused template = %v", err)
		}
	}
	if entries, _ := os.ReadDir(canary); len(entries) != 0 {
		t.Errorf("the directory behind etc-link's /etc holds %d entries; want none", len(entries))
	}

	r, err := d.rootOf("mini")
	if err != nil {
		t.Fatalf("rootOf(mini) = %v", err)
	}
	var want []string
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat(filepath.Join(good, name)); err == nil && fi.IsDir() {
			want = append(want, "/"+name)
		}
	}
	if !slices.Equal(r.writable, want) || !slices.Contains(r.writable, "/lib32") {
		t.Errorf("rootOf(mini).writable = %v, want %v (the root's real directories, not its links)", r.writable, want)
	}
	if len(r.lowers) != 2 || r.lowers[0].path != d.mountPoints || r.lowers[1].fd < 0 || !r.dir {
		t.Errorf("rootOf(mini) = %+v; want the mount points over the held root", r)
	}
}

// templateScript prints key=value lines about a template sandbox's root as
// seen from inside, with the template's sh, cat and ls only.
const templateScript = `
exec > /workspace/out 2>&1
echo marker=$(cat /` + templateMarker + `)
echo etc_hostname=$(cat /etc/hostname)
echo passwd=$(cat /etc/passwd)
echo dev=$(ls /dev)
echo proc_self=$(cat /proc/self/comm)
echo kcore=$(cat /proc/kcore)
echo x > /dev/null && echo devnull=ok
echo x > /usr/sbx-written && echo usr=rw
echo x > /tmp/sbx-written && echo tmp=rw
echo x > /etc/sbx-written && echo etc=rw
`

// TestDirectoryTemplateJail starts sandboxes of a good template and of two
// hostile ones, whose /dev, /proc, /tmp and /workspace are links to host
// paths, or whose /dev/null is a link to core_pattern, /proc is filled and
// /etc/hostname is a link to a host file: each sandbox gets the template's
// files, its own /etc/hostname, /dev, /proc, /tmp and /workspace, and
// nothing on the host changes.
func TestDirectoryTemplateJail(t *testing.T) {
	core, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	hostDev, _ := os.ReadDir("/dev")
	canaryDir := t.TempDir()
	canary := filepath.Join(canaryDir, "canary")
	os.WriteFile(canary, []byte("canary\n"), 0o644)

	good := miniTemplate(t)
	links := miniTemplate(t)
	for name, target := range map[string]string{"dev": "/dev", "proc": "/proc/sys/kernel", "tmp": canaryDir, "workspace": "../../../../" + canaryDir} {
		os.RemoveAll(filepath.Join(links, name))
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	planted := miniTemplate(t)
	os.MkdirAll(filepath.Join(planted, "dev"), 0o755)
	os.Symlink("/proc/sys/kernel/core_pattern", filepath.Join(planted, "dev", "null"))
	os.MkdirAll(filepath.Join(planted, "proc", "self"), 0o755)
	os.WriteFile(filepath.Join(planted, "proc", "kcore"), []byte("planted"), 0o644)
	os.WriteFile(filepath.Join(planted, "proc", "self", "comm"), []byte("planted"), 0o644)
	os.Remove(filepath.Join(planted, "etc", "hostname"))
	os.Symlink(canary, filepath.Join(planted, "etc", "hostname"))
	os.Symlink(canary, filepath.Join(planted, "etc", "hosts"))
	before := map[string][]string{}
	for _, dir := range []string{good, links, planted} {
		before[dir] = snapshot(t, dir)
	}

	d, _ := openTestWith(t, func(o *backend.Options) {
		o.Templates = map[string]string{"good": good, "links": links, "planted": planted}
	}, "/bin/sh", "-c", templateScript)
	for _, name := range []string{"good", "links", "planted"} {
		t.Run(name, func(t *testing.T) {
			id := sandbox.NewID()
			sp := spec(id)
			sp.Template = name
			if _, err := d.Start(t.Context(), sp); err != nil {
				t.Fatalf("Start = %v", err)
			}
			defer func() {
				if err := d.Destroy(context.Background(), id); err != nil {
					t.Errorf("Destroy = %v", err)
				}
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if ex, err := d.Wait(ctx, id); err != nil || ex.Code != 0 {
				t.Errorf("Wait = %+v, %v; want code 0", ex, err)
			}
			out, err := os.ReadFile(filepath.Join(d.dir(id), "workspace/out"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("inside:\n%s", out)
			got := map[string]string{}
			for _, l := range strings.Split(string(out), "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					got[k] = v
				}
			}
			want := map[string]string{
				"marker": "from the template", "etc_hostname": string(id),
				"passwd": "root:x:0:0:template root:/root:/bin/sh",
				"dev":    "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero",
				// cat's own comm; /proc/kcore behind the mask.
				"proc_self": "cat", "kcore": "", "devnull": "ok", "usr": "rw", "tmp": "rw", "etc": "rw",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("inside %s = %q, want %q", k, got[k], v)
				}
			}
			for _, f := range []string{"upper/root/usr/sbx-written", "upper/root/etc/sbx-written"} {
				if _, err := os.Stat(filepath.Join(d.dir(id), f)); err != nil {
					t.Errorf("the sandbox's write is not in its upper layer: %v", err)
				}
			}
		})
	}
	for dir, was := range before {
		if now := snapshot(t, dir); !slices.Equal(now, was) {
			t.Errorf("the template root %s changed:\nnow %q\nwas %q", dir, now, was)
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary\n" {
		t.Errorf("the host file behind planted's /etc/hostname reads %q", b)
	}
	if entries, _ := os.ReadDir(canaryDir); len(entries) != 1 {
		t.Errorf("the host directory behind links' /tmp and /workspace holds %d entries, want 1", len(entries))
	}
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(core) {
		t.Errorf("host core_pattern changed: %q, was %q", now, core)
	}
	if now, _ := os.ReadDir("/dev"); len(now) != len(hostDev) {
		t.Errorf("host /dev has %d entries, had %d", len(now), len(hostDev))
	}
}

// TestDirectoryTemplateAgent runs the real agent on a directory template:
// create, exec, a file written by the API and read by a command and back,
// and the same isolation report as a sandbox of the host template.
func TestDirectoryTemplateAgent(t *testing.T) {
	root := miniTemplate(t)
	d, _ := openTestWith(t, func(o *backend.Options) {
		o.Exe = testutil.BuildSBX(t)
		o.Templates = map[string]string{"mini": root}
	})
	d.testArgv = nil
	start := func(template string) *backend.Instance {
		sp := spec(sandbox.NewID())
		sp.Template = template
		sp.RequireLayers = sandbox.AllLayers
		inst, err := d.Start(t.Context(), sp)
		if err != nil {
			t.Fatalf("Start(template %s) = %v", template, err)
		}
		t.Cleanup(func() {
			if err := d.Destroy(context.Background(), sp.ID); err != nil {
				t.Errorf("Destroy = %v", err)
			}
		})
		return inst
	}
	host, inst := start(sandbox.TemplateHost), start("mini")
	if !equalLayers(inst.Applied.Layers, host.Applied.Layers) || inst.Applied.Level != host.Applied.Level ||
		inst.Applied.LandlockABI != host.Applied.LandlockABI || inst.Applied.SeccompProfile != host.Applied.SeccompProfile {
		t.Errorf("template sandbox's isolation = %+v; want the host template's %+v", inst.Applied, host.Applied)
	}
	cl := agentclient.New(inst.ID, inst.Dial)
	defer cl.Close()
	run := func(shell string) string {
		t.Helper()
		res, err := cl.Exec(t.Context(), sandbox.ExecRequest{Shell: shell, Timeout: 30 * time.Second, OutputLimitBytes: 1 << 20}, false, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q = %+v, %v", shell, res, err)
		}
		return string(res.Stdout)
	}
	if got := run("cat /" + templateMarker + " /etc/hostname"); got != "from the template\n"+string(inst.ID)+"\n" {
		t.Errorf("marker and hostname inside = %q", got)
	}
	if _, err := cl.WriteFile(t.Context(), "/workspace/api.txt", []byte("written by the API\n"), 0o644, false); err != nil {
		t.Fatalf("WriteFile = %v", err)
	}
	if got := run("cat /workspace/api.txt && echo and by sh > /workspace/sh.txt"); got != "written by the API\n" {
		t.Errorf("cat of the API's file = %q", got)
	}
	r, err := cl.ReadFile(t.Context(), "/workspace/sh.txt", 0, 0)
	if err != nil || string(r.Content) != "and by sh\n" {
		t.Errorf("ReadFile of the shell's file = %q, %v", r.Content, err)
	}
}

func equalLayers(a, b map[string]sandbox.LayerState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
