package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The streams of exec lose nothing: a reader slower than the process slows the
// process, never drops its output. The file is random bytes (not UTF-8), so
// every chunk takes the binary path of each format.
const (
	bigFileSize = 1 << 30
	bigFile     = "/workspace/big.bin"
)

// streamSandbox makes a sandbox with the big file and returns its id and the
// file's sha256.
func streamSandbox(t *testing.T, d *daemon) (id, sum string) {
	t.Helper()
	id = d.create(map[string]any{"disk_mb": 2048, "timeout": 1800})
	res := d.exec(id, map[string]any{"timeout": 600, "command": fmt.Sprintf(
		"head -c %d /dev/urandom > %s && sha256sum %s", bigFileSize, bigFile, bigFile)})
	f := strings.Fields(res.Stdout)
	if res.ExitCode != 0 || len(f) != 2 {
		t.Fatalf("making the file: %+v", res)
	}
	return id, f[0]
}

func TestExecStreamComplete(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 4 GiB")
	}
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	id, sum := streamSandbox(t, d)
	command := func(n int64) []string {
		return []string{"sh", "-c", fmt.Sprintf("head -c %d %s; echo done >&2", n, bigFile)}
	}

	t.Run("cli", func(t *testing.T) {
		// sbx exec into a pipe, as a script would: `sbx exec … | sha256sum`.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, sbxBin, append([]string{"exec", "--timeout", "600", id, "--"}, command(bigFileSize)...)...)
		cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key)
		h := sha256.New()
		n := &countWriter{w: h}
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = n, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("sbx exec: %v (stderr %q)", err, stderr.String())
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum || n.n != bigFileSize {
			t.Errorf("stdout: %d bytes, sha256 %s; want %d bytes, %s", n.n, got, bigFileSize, sum)
		}
		if stderr.String() != "done\n" {
			t.Errorf("stderr = %q, want the line printed after the output", stderr.String())
		}
	})

	for _, format := range []string{"ndjson", "sse"} {
		t.Run(format, func(t *testing.T) {
			got := streamAll(t, d, id, format, command(bigFileSize), 0)
			got.check(t, bigFileSize, sum)
		})
	}

	t.Run("slow-reader", func(t *testing.T) {
		// A reader that stops for 5 s still gets every byte, and the
		// daemon holds none of it meanwhile: the process waits.
		w := d.rssWatch()
		got := streamAll(t, d, id, "frames", command(bigFileSize), 5*time.Second)
		peak, start := w.stop()
		got.check(t, bigFileSize, sum)
		t.Logf("daemon RSS %d MiB at the start, peak %d MiB", start>>20, peak>>20)
		if peak-start > 64<<20 {
			t.Errorf("the daemon's RSS grew by %d MiB while its reader paused: it buffered the stream", (peak-start)>>20)
		}
		if got.durationMS < 5000 {
			t.Errorf("the process ran %d ms, less than the reader's 5 s pause: it did not wait for its reader", got.durationMS)
		}
	})
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.w.Write(p)
}

// streamGot is what one streamed exec delivered.
type streamGot struct {
	stdout     hash.Hash
	n          int64
	stderr     string
	dropped    int64
	exitCode   int
	durationMS int64
	result     bool
}

func (g *streamGot) check(t *testing.T, size int64, sum string) {
	t.Helper()
	if got := hex.EncodeToString(g.stdout.Sum(nil)); got != sum || g.n != size {
		t.Errorf("stdout: %d bytes, sha256 %s; want %d bytes, %s", g.n, got, size, sum)
	}
	if g.stderr != "done\n" || g.dropped != 0 || !g.result || g.exitCode != 0 {
		t.Errorf("stderr %q, dropped %d, result %v, exit %d; want done, 0, a result, 0", g.stderr, g.dropped, g.result, g.exitCode)
	}
}

// streamAll runs argv as a streamed exec in format (ndjson, sse or frames),
// reading its first chunks, then nothing for pause, then the rest.
func streamAll(t *testing.T, d *daemon, id, format string, argv []string, pause time.Duration) *streamGot {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"argv": argv, "timeout": 600})
	req, _ := http.NewRequest("POST", d.url+"/v1/sandboxes/"+id+"/exec?stream="+format, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("exec ?stream=%s = %d %s", format, resp.StatusCode, b)
	}
	got := &streamGot{stdout: sha256.New()}
	paused := pause == 0
	event := func(typ string, payload []byte) {
		if !paused && got.n > 1<<20 {
			time.Sleep(pause)
			paused = true
		}
		if typ == "stdout" || typ == "stderr" {
			data := payload
			if format != "frames" {
				var ev struct {
					Data       string `json:"data"`
					DataBase64 string `json:"data_base64"`
				}
				if err := json.Unmarshal(payload, &ev); err != nil {
					t.Fatalf("event %.200q: %v", payload, err)
				}
				data = []byte(ev.Data)
				if ev.DataBase64 != "" {
					data, _ = base64.StdEncoding.DecodeString(ev.DataBase64)
				}
			}
			if typ == "stdout" {
				got.stdout.Write(data)
				got.n += int64(len(data))
			} else {
				got.stderr += string(data)
			}
			return
		}
		var ev struct {
			Type       string `json:"type"`
			Bytes      int64  `json:"bytes"`
			ExitCode   int    `json:"exit_code"`
			DurationMS int64  `json:"duration_ms"`
		}
		if err := json.Unmarshal(payload, &ev); err != nil {
			t.Fatalf("event %.200q: %v", payload, err)
		}
		switch ev.Type {
		case "dropped":
			got.dropped += ev.Bytes
		case "result":
			got.result, got.exitCode, got.durationMS = true, ev.ExitCode, ev.DurationMS
		case "error":
			t.Fatalf("error event: %s", payload)
		}
	}
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	switch format {
	case "frames":
		var hdr [8]byte
		for {
			if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("reading a frame: %v", err)
			}
			payload := make([]byte, binary.BigEndian.Uint32(hdr[4:]))
			if _, err := io.ReadFull(br, payload); err != nil {
				t.Fatalf("reading a frame: %v", err)
			}
			typ := map[byte]string{1: "stdout", 2: "stderr"}[hdr[0]]
			event(typ, payload)
		}
	case "ndjson":
		for {
			line, err := br.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				event(eventType(line), line)
			}
			if err != nil {
				break
			}
		}
	case "sse":
		var typ string
		for {
			line, err := br.ReadBytes('\n')
			switch {
			case bytes.HasPrefix(line, []byte("event: ")):
				typ = strings.TrimSpace(string(line[len("event: "):]))
			case bytes.HasPrefix(line, []byte("data: ")):
				event(typ, bytes.TrimSpace(line[len("data: "):]))
			}
			if err != nil {
				break
			}
		}
	}
	return got
}

// eventType is the type of one NDJSON event, which the daemon writes first.
func eventType(line []byte) string {
	const prefix = `{"type":"`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return ""
	}
	rest := line[len(prefix):]
	if i := bytes.IndexByte(rest, '"'); i >= 0 {
		return string(rest[:i])
	}
	return ""
}

// TestExecClosedPipe: `sbx exec ID -- yes | head -c 10` ends as a local
// pipeline does: once its stdout's reader is gone, sbx exits 141 (128 +
// SIGPIPE), quietly, and the command is gone from the sandbox, not left
// running to its timeout.
func TestExecClosedPipe(t *testing.T) {
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	id := d.create(nil)
	yes := func() string { return strings.TrimSpace(d.sh(id, "ps -eo comm | grep -cx yes || true").Stdout) }
	cmd := exec.Command(sbxBin, "exec", "--timeout", "600", id, "--", "yes")
	cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(out, make([]byte, 10)); err != nil {
		t.Fatalf("reading sbx exec's output: %v", err)
	}
	// The control: while sbx's output is read, the command runs.
	if n := yes(); n != "1" {
		t.Fatalf("control: %s yes processes while sbx exec's output is read, want 1", n)
	}
	out.Close() // what head does once it has its 10 bytes
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 141 || stderr.Len() != 0 {
		t.Errorf("sbx exec into a closed pipe: %v, stderr %q; want exit 141 and nothing", err, stderr.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for yes() != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("yes still runs in the sandbox 10 s after sbx exited")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
