package agent

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/procmaps"
)

// codeResidency sums Size and Rss (KiB) over this process's file-backed
// executable mappings, from /proc/self/smaps.
func codeResidency(t *testing.T) (size, rss int) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := procmaps.Parse(sc.Text()); ok {
			in = fileCode(m)
			continue
		}
		fields := strings.Fields(sc.Text())
		if !in || len(fields) < 2 {
			continue
		}
		n, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "Size:":
			size += n
		case "Rss:":
			rss += n
		}
	}
	return size, rss
}

// TestPopulateTextMapsAllCode: after populateText every page of the program's
// code is mapped (Rss equals Size), where a fresh process has mapped only what
// it ran.
func TestPopulateTextMapsAllCode(t *testing.T) {
	size, before := codeResidency(t)
	if size == 0 {
		t.Fatal("no file-backed executable mapping in /proc/self/smaps")
	}
	if before >= size {
		t.Logf("code already fully mapped before the call (%d of %d KiB): nothing to tell apart", before, size)
	}
	if err := populateText(); errors.Is(err, unix.EINVAL) {
		t.Skipf("the kernel lacks MADV_POPULATE_READ (Linux 5.14): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	_, after := codeResidency(t)
	if after != size {
		t.Errorf("after populateText %d of %d KiB of code are mapped (before: %d); want all", after, size, before)
	}
}

// The warm-up waits while a request is in flight and for warmIdle after it,
// then runs once.
func TestWhenIdle(t *testing.T) {
	var a activity
	release := make(chan struct{})
	h := a.track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	served := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		close(served)
	}()
	for a.inFlight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ran := make(chan time.Time, 2)
	go a.whenIdle(5*time.Millisecond, func() { ran <- time.Now() })
	select {
	case <-ran:
		t.Fatal("ran while a request was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-served
	ended := a.last.Load() // when the request ended
	at := <-ran
	if quiet := time.Duration(at.UnixNano() - ended); quiet < 5*time.Millisecond {
		t.Errorf("ran %v after the request ended, want at least the idle time", quiet)
	}
	select {
	case <-ran:
		t.Error("ran twice")
	case <-time.After(20 * time.Millisecond):
	}
}
