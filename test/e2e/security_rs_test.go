// This file implements the RS rows of the attack catalogue (SECURITY.md §5):
// starvation, output floods, timeouts, hostile uploads and CPU limits. The
// bounds are the catalogue's own correctness limits, not performance targets.

package e2e

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }

// cpuSeconds sums the CPU time the host accounts to pids.
func cpuSeconds(pids []string) float64 {
	var ticks int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
		if len(f) > 13 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			k, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + k
		}
	}
	return float64(ticks) / 100 // USER_HZ
}

// timedCall does one recorded request and says how long it took.
func (r *run) timedCall(method, path string, body any) (int, []byte, time.Duration) {
	began := time.Now()
	st, b := r.api(method, path, body)
	return st, b, time.Since(began)
}

// --- RS-03: starvation ------------------------------------------------------------

func rs03Setup(r *run) error {
	r.create(map[string]any{"cpus": 2, "memory_mb": 128})
	return nil
}

func rs03Control(r *run) error {
	id := r.a()
	m := "rs03-" + randHex(4)
	r.set("m", m)
	cmd := fmt.Sprintf(`for i in 1 2 3 4; do sh -c 'while :; do :; done' %s-spin & done
python3 -c 'import time; x = bytearray(100 << 20); x[::4096] = b"x" * len(x[::4096]); time.sleep(3600)' %s-mem &
wait`, m, m)
	if bg := r.exec(id, map[string]any{"command": cmd, "background": true, "timeout": 3600}); bg.ProcessID == "" {
		return fmt.Errorf("starting the spinners")
	}
	// The far end: the host accounts CPU to the spinners and memory to the
	// sandbox.
	if !waitUntil(10*time.Second, func() bool { return len(hostPidsWith(m+"-spin")) >= 4 }) {
		return fmt.Errorf("control: the host sees %d spinners", len(hostPidsWith(m+"-spin")))
	}
	before := cpuSeconds(hostPidsWith(m + "-spin"))
	time.Sleep(time.Second)
	used := cpuSeconds(hostPidsWith(m+"-spin")) - before
	if used < 0.5 {
		return fmt.Errorf("control: the spinners used %.2f s of CPU in 1 s", used)
	}
	var mem int64
	waitUntil(10*time.Second, func() bool {
		for _, c := range sandboxCgroups(r.d, id) {
			for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
				if b, err := os.ReadFile(c + "/" + f); err == nil {
					mem, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				}
			}
		}
		return mem > 90<<20
	})
	r.note("spinners: %.2f CPU-s per s; sandbox memory %d MiB of 128", used, mem>>20)
	if mem < 90<<20 {
		return fmt.Errorf("control: the sandbox holds %d MiB, want about 100", mem>>20)
	}
	return nil
}

func rs03Attack(r *run) error {
	id := r.a()
	const bound = 10 * time.Second // SECURITY.md RS-03
	var worst time.Duration
	for range 5 {
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/sandboxes/" + id + "/exec", map[string]any{"command": "echo ok", "timeout": 30}},
			{"POST", "/v1/sandboxes/" + r.env.sibling + "/exec", map[string]any{"command": "echo ok", "timeout": 30}},
			{"GET", "/v1/health", nil},
			{"GET", "/v1/sandboxes/" + id, nil},
		} {
			st, b, d := r.timedCall(c.method, c.path, c.body)
			worst = max(worst, d)
			busy := st == 429 || st == 503
			if st != 200 && !busy {
				r.breach("RS-03: %s %s under starvation = %d %.200s", c.method, c.path, st, b)
			}
			if d > bound {
				r.breach("RS-03: %s %s took %s under starvation (bound %s)", c.method, c.path, d, bound)
			}
		}
	}
	r.note("slowest call under starvation: %s", worst.Round(time.Millisecond))
	return nil
}

// --- RS-07: output floods ---------------------------------------------------------

func rs07Setup(r *run) error {
	r.create(nil)
	return nil
}

func rs07Control(r *run) error {
	id := r.a()
	res := r.sh(id, "head -c 3000 /dev/urandom | base64 -w0 | tee ctl.txt")
	st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q("/workspace/ctl.txt"), nil)
	var fc struct{ Content string }
	json.Unmarshal(b, &fc)
	if st != 200 || res.Stdout == "" || fc.Content != res.Stdout {
		return fmt.Errorf("control: exec output and the file it wrote differ: %d", st)
	}
	// The cap: head and tail kept, the whole stream in the spill file.
	res = r.exec(id, map[string]any{"command": `i=0; while [ $i -lt 40000 ]; do echo "line $i of output padding padding padding"; i=$((i+1)); done`, "timeout": 120})
	if !res.Truncated || res.StdoutDropped == 0 || res.StdoutPath == "" {
		return fmt.Errorf("control: 3 MB of output: truncated=%v dropped=%d path=%q", res.Truncated, res.StdoutDropped, res.StdoutPath)
	}
	if !strings.HasPrefix(res.Stdout, "line 0 of") || !strings.Contains(res.Stdout, "line 39999 of") || len(res.Stdout) > 1<<20+4096 {
		return fmt.Errorf("control: head and tail not both kept within 1 MiB (%d bytes)", len(res.Stdout))
	}
	if full := r.sh(id, "wc -l < "+res.StdoutPath); strings.TrimSpace(full.Stdout) != "40000" {
		return fmt.Errorf("control: the spill file has %q lines, want 40000", full.Stdout)
	}
	return nil
}

func rs07Attack(r *run) error {
	id := r.a()
	w := r.d.rssWatch()
	defer w.stop()
	// 1. JSON exec, `yes` for 5 s.
	res := r.exec(id, map[string]any{"command": "yes", "timeout": 5})
	if !res.Truncated || res.StdoutDropped == 0 || !strings.HasPrefix(res.Stdout, "y\ny\n") || len(res.Stdout) > 1<<20+4096 {
		r.breach("RS-07: yes for 5 s: truncated=%v dropped=%d, %d bytes returned", res.Truncated, res.StdoutDropped, len(res.Stdout))
	}
	r.note("yes for 5 s: %d bytes dropped between head and tail", res.StdoutDropped)
	// 2. Binary flood with a small limit; the spill file is bounded too.
	res = r.exec(id, map[string]any{"command": "base64 /dev/urandom", "timeout": 3, "output_limit_bytes": 65536})
	if !res.Truncated || len(res.Stdout) > 65536+4096 {
		r.breach("RS-07: base64 flood with a 64 KiB limit: truncated=%v, %d bytes", res.Truncated, len(res.Stdout))
	}
	if res.StdoutPath != "" {
		sz := r.sh(id, "stat -c %s "+res.StdoutPath)
		n, _ := strconv.ParseInt(strings.TrimSpace(sz.Stdout), 10, 64)
		r.note("spill file of the base64 flood: %d MiB", n>>20)
		if n > 256<<20+1<<20 {
			r.breach("RS-07: the spill file holds %d MiB, over the 256 MiB spill limit", n>>20)
		}
	}
	// 3. A streaming exec read slowly, then dropped.
	body, _ := json.Marshal(map[string]any{"command": "yes", "timeout": 6})
	req, _ := http.NewRequest("POST", r.d.url+"/v1/sandboxes/"+id+"/exec", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("streaming exec: %v", err)
	}
	end := time.Now().Add(3 * time.Second)
	buf := make([]byte, 1024)
	var got int
	for time.Now().Before(end) {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp.Body.Close()
	r.note("slow reader took %d KiB in 3 s, then hung up", got>>10)
	// No deadlock: the sandbox still answers.
	if res := r.exec(id, map[string]any{"command": "echo alive", "timeout": 10}); res.Stdout != "alive\n" {
		r.breach("RS-07: after the slow reader the sandbox does not answer: %+v", res)
	}
	// 4. A background flood, attached with replay after it is killed.
	bg := r.exec(id, map[string]any{"command": "base64 /dev/urandom", "background": true, "timeout": 60})
	time.Sleep(2 * time.Second)
	r.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
	client := &http.Client{Timeout: 20 * time.Second}
	st, b, err := r.timedGet(client, "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/output?replay=true", 0)
	if err != nil || st != 200 {
		r.breach("RS-07: replaying a killed background flood = %d, %v", st, err)
	} else if len(b) > 8<<20 {
		r.breach("RS-07: the replay of a background flood is %d MiB", len(b)>>20)
	}
	peak, start := w.stop()
	r.note("daemon RSS %d MiB at the start, peak %d MiB; no PTY route exists yet (gap)", start>>20, peak>>20)
	if peak-start > rssBudget {
		r.breach("RS-07: daemon RSS grew by %d MiB (budget %d MiB)", (peak-start)>>20, rssBudget>>20)
	}
	return nil
}

// --- RS-09: timeouts --------------------------------------------------------------

func rs09Setup(r *run) error {
	r.create(nil)
	return nil
}

func rs09Control(r *run) error {
	res := r.exec(r.a(), map[string]any{"command": "sleep 0.2; echo done", "timeout": 10})
	if res.Reason != "exited" || res.ExitCode != 0 || res.Stdout != "done\n" {
		return fmt.Errorf("control: a command within its timeout = %+v", res)
	}
	return nil
}

func rs09Attack(r *run) error {
	id := r.a()
	const timeout = 2
	m := "rs09-" + randHex(4)
	cmd := fmt.Sprintf(`sh -c 'trap "" TERM; while :; do :; done' %[1]s-loop &
setsid sh -c 'trap "" TERM HUP; sh -c "trap \"\" TERM HUP; sleep 100000" %[1]s-gc & sleep 100000' %[1]s-session &
trap "" TERM; while :; do sleep 1; done`, m)
	var seen int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the far end of the control: the tree exists on the host
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				seen = max(seen, len(hostPidsWith(m)))
			}
		}
	})
	began := time.Now()
	res := r.exec(id, map[string]any{"command": cmd, "timeout": timeout})
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if seen < 3 {
		return fmt.Errorf("the host never saw the tree (at most %d processes)", seen)
	}
	if res.Reason != "timeout" || res.ExitCode != 124 {
		r.breach("RS-09: reason %q exit %d, want timeout 124", res.Reason, res.ExitCode)
	}
	// T ± 1 s, by the process's own duration and by the client's clock.
	if d := time.Duration(res.DurationMS) * time.Millisecond; d < (timeout-1)*time.Second || d > (timeout+1)*time.Second {
		r.breach("RS-09: duration_ms %d, want %d s ± 1 s", res.DurationMS, timeout)
	}
	if took > (timeout+1)*time.Second+500*time.Millisecond {
		r.note("the response came %s after the request (timeout %d s)", took.Round(10*time.Millisecond), timeout)
	}
	// The whole tree is gone by T + grace (the grace is 0: cgroup.kill).
	if !waitUntil(time.Second, func() bool { return len(hostPidsWith(m)) == 0 }) {
		r.breach("RS-09: %d processes of the tree outlive the timeout", len(hostPidsWith(m)))
	}
	r.note("%d processes seen, reason %s after %d ms", seen, res.Reason, res.DurationMS)
	return nil
}

// --- RS-10: hostile uploads -------------------------------------------------------

func rs10Setup(r *run) error {
	r.create(map[string]any{"disk_mb": 256})
	return nil
}

func rs10Control(r *run) error {
	id := r.a()
	data := []byte(strings.Repeat(randHex(16), 1<<15)) // 1 MiB
	st, b := r.raw("PUT", "/v1/sandboxes/"+id+"/files/upload?path="+q("/workspace/ctl.bin"), strings.NewReader(string(data)), nil)
	if st != 200 {
		return fmt.Errorf("control: upload = %d %s", st, b)
	}
	res := r.sh(id, "sha256sum /workspace/ctl.bin | cut -c1-64")
	if strings.TrimSpace(res.Stdout) != fmt.Sprintf("%x", sha256Sum(data)) {
		return fmt.Errorf("control: the uploaded file's hash differs: %+v", res)
	}
	return nil
}

// zeroReader yields n bytes of 'z'.
type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), z.n))
	for i := range k {
		p[i] = 'z'
	}
	z.n -= int64(k)
	return k, nil
}

func rs10Attack(r *run) error {
	id := r.a()
	size := int64(1 << 30)
	if soak() {
		size = 4 << 30
	}
	w := r.d.rssWatch()
	defer w.stop()
	host, _ := url.Parse(r.d.url)
	var wg sync.WaitGroup
	// Slowloris, alongside the big upload: headers one byte a second, a
	// body one byte a second, and a chunked body nobody reads (the request
	// has no key) one byte a second. The server must hang up within 15 s.
	slow := func(name, prefix, unit string) {
		c, err := net.Dial("tcp", host.Host)
		if err != nil {
			r.breach("RS-10 %s: dial: %v", name, err)
			return
		}
		defer c.Close()
		c.Write([]byte(prefix))
		end := time.Now().Add(15 * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte{unit[i%len(unit)]}); err != nil {
				r.note("%s: the server hung up (write: %v)", name, err)
				return
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			if line, _, _ := strings.Cut(string(buf[:n]), "\r\n"); strings.HasPrefix(line, "HTTP/") {
				r.note("%s: the server answered %q", name, line)
			}
			if err != nil && !isTimeout(err) {
				r.note("%s: the server hung up", name)
				return
			}
		}
		r.breach("RS-10 %s: the connection is still open after 15 s: no server timeout fires", name)
	}
	path := "/v1/sandboxes/" + id + "/files/upload?path=" + q("/workspace/slow")
	wg.Go(func() { slow("slow headers", "PUT "+path+" HTTP/1.1\r\nHost: x\r\nX-Slow: ", "x") })
	wg.Go(func() {
		slow("slow body", "PUT "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+r.d.key+"\r\nContent-Length: 1048576\r\n\r\n", "X")
	})
	wg.Go(func() {
		slow("slow unread body", "PUT "+path+" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "1\r\nX\r\n")
	})
	// 1. A GiB, streamed with a length, into a sandbox with disk_mb 256.
	began := time.Now()
	req, _ := http.NewRequest("PUT", r.d.url+"/v1/sandboxes/"+id+"/files/upload?path="+q("/workspace/big"), &zeroReader{n: size})
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	st, b := doRecorded(r, req)
	r.note("%d MiB upload with a length = %d in %s", size>>20, st, time.Since(began).Round(100*time.Millisecond))
	switch {
	case st == 413 || st == 507:
	case st == 200:
		r.breach("RS-10: a %d MiB upload into a sandbox with disk_mb 256 = 200: no upload cap (413) and no quota hold", size>>20)
	default:
		r.breach("RS-10: a %d MiB upload = %d %.200s, want 413 at the cap", size>>20, st, b)
	}
	r.sh(id, "rm -f /workspace/big")
	// 2. Chunked, with no length.
	req, _ = http.NewRequest("PUT", r.d.url+"/v1/sandboxes/"+id+"/files/upload?path="+q("/workspace/chunked"), io.MultiReader(&zeroReader{n: 256 << 20}))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	st, b = doRecorded(r, req)
	if st >= 500 {
		r.breach("RS-10: a chunked upload = %d %.200s", st, b)
	}
	r.sh(id, "rm -f /workspace/chunked")
	// 2b. Chunked past the quota: cut at the cap, and the partial file goes.
	req, _ = http.NewRequest("PUT", r.d.url+"/v1/sandboxes/"+id+"/files/upload?path="+q("/workspace/over"), io.MultiReader(&zeroReader{n: 257 << 20}))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	// The upload cap (413), or the sandbox's filesystem quota, which holds
	// the sandbox's own files too and may fill first (a typed disk error).
	if st, b = doRecorded(r, req); st != 413 && !(st == 429 && strings.Contains(string(b), "no space left on the sandbox's disk")) {
		r.breach("RS-10: a chunked upload of 257 MiB into a sandbox with disk_mb 256 = %d %.200s, want 413 or the disk quota's error", st, b)
	}
	over := ""
	if !waitUntil(5*time.Second, func() bool {
		over = strings.TrimSpace(r.sh(id, "ls -a /workspace | grep -e over; true").Stdout)
		return over == ""
	}) {
		r.breach("RS-10: an upload cut at the quota left %q behind", over)
	}
	// 3. Aborted mid-stream: the partial file goes.
	c, err := net.Dial("tcp", host.Host)
	if err != nil {
		return err
	}
	fmt.Fprintf(c, "PUT /v1/sandboxes/%s/files/upload?path=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", id, q("/workspace/aborted"), r.d.key, 64<<20)
	chunk := make([]byte, 1<<20)
	for range 8 {
		c.Write(chunk)
	}
	time.Sleep(300 * time.Millisecond)
	c.Close()
	left := ""
	if !waitUntil(5*time.Second, func() bool {
		left = strings.TrimSpace(r.sh(id, "ls -a /workspace | grep -e aborted; true").Stdout)
		return left == ""
	}) {
		r.breach("RS-10: an aborted upload left %q behind", left)
	}
	wg.Wait()
	peak, start := w.stop()
	r.note("daemon RSS %d MiB at the start, peak %d MiB", start>>20, peak>>20)
	if peak-start > rssBudget {
		r.breach("RS-10: daemon RSS grew by %d MiB (budget %d MiB)", (peak-start)>>20, rssBudget>>20)
	}
	return nil
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// doRecorded does req and records the response.
func doRecorded(r *run, req *http.Request) (int, []byte) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r.record(b)
	return resp.StatusCode, b
}

// --- RS-13: CPU limits under load -------------------------------------------------

// rs13CPUs is each sandbox's limit: two of them with two spinners each would
// take a core apiece on a 2-core host without it, four times the limit.
const rs13CPUs = 0.25

func rs13Setup(r *run) error {
	for range 2 {
		r.create(map[string]any{"cpus": rs13CPUs})
	}
	return nil
}

func rs13Control(r *run) error {
	// Unconfined: the same spinner on the host uses a core, so the measure
	// can tell a limit from idleness.
	m := "rs13h-" + randHex(4)
	cmd := startHost("sh", "-c", "while :; do :; done", m)
	defer cmd()
	time.Sleep(100 * time.Millisecond)
	before := cpuSeconds(hostPidsWith(m))
	time.Sleep(time.Second)
	if used := cpuSeconds(hostPidsWith(m)) - before; used < 0.3 {
		return fmt.Errorf("control: a host spinner used %.2f CPU-s in 1 s", used)
	}
	return nil
}

func rs13Attack(r *run) error {
	window := 2 * time.Second
	marks := map[string]string{}
	for _, id := range r.sandboxes {
		m := "rs13-" + randHex(4)
		marks[id] = m
		r.exec(id, map[string]any{"command": fmt.Sprintf("for i in 1 2; do sh -c 'while :; do :; done' %s & done; wait", m), "background": true, "timeout": 60})
	}
	for id, m := range marks {
		if !waitUntil(10*time.Second, func() bool { return len(hostPidsWith(m)) >= 2 }) {
			return fmt.Errorf("the spinners of %s never showed", id)
		}
	}
	time.Sleep(500 * time.Millisecond)
	before := map[string]float64{}
	for id, m := range marks {
		before[id] = cpuSeconds(hostPidsWith(m))
	}
	began := time.Now()
	// The victim is served meanwhile.
	st, b, d := r.timedCall("POST", "/v1/sandboxes/"+r.env.sibling+"/exec", map[string]any{"command": "echo ok", "timeout": 30})
	if st != 200 || d > 10*time.Second {
		r.breach("RS-13: the sibling's exec under load = %d in %s %.100s", st, d, b)
	}
	time.Sleep(window - time.Since(began))
	elapsed := time.Since(began).Seconds()
	for id, m := range marks {
		used := cpuSeconds(hostPidsWith(m)) - before[id]
		limit := rs13CPUs * elapsed
		r.note("%s: %.2f CPU-s in %.2f s (limit %.2f CPU)", id[:6], used, elapsed, rs13CPUs)
		if used > limit*1.3+0.1 {
			r.breach("RS-13: sandbox %s used %.2f CPU-s in %.2f s with cpus %.2f", id, used, elapsed, rs13CPUs)
		}
	}
	res := r.sh(r.a(), "nproc; grep -c ^processor /proc/cpuinfo")
	r.note("inside a cpus %.2f sandbox nproc and /proc/cpuinfo say %q: the host's cores, not the limit (documented in the README's security section)", rs13CPUs, strings.Join(strings.Fields(res.Stdout), " and "))
	for _, id := range r.sandboxes {
		r.api("GET", "/v1/sandboxes/"+id+"/processes", nil)
	}
	return nil
}

// startHost starts a host process and returns a function that kills it.
func startHost(argv ...string) func() {
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		return func() {}
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}
