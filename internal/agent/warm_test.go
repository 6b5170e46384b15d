package agent

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = fileCode(fields)
			continue
		}
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
