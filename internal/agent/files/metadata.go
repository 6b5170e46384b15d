// This file implements E2B's file metadata: string pairs a client attaches
// to a file it writes (X-Metadata-<key> headers) and reads back with the
// file's entry. They are kept on the file itself, as user.e2b.<key> extended
// attributes, so they go with it when it moves and vanish when it does.

package files

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds of a file's metadata, as envd's: a key at most 246 bytes (the VFS's
// xattr name limit less the prefix), all of a file's metadata at most 4096
// bytes, the prefix counted with each key.
const (
	MaxMetadataKey   = 246
	MaxMetadataBytes = 4096
)

// metadataPrefix names the extended attributes metadata lives in.
const metadataPrefix = "user.e2b."

// printable reports whether s is printable US-ASCII (0x20-0x7e).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CheckMetadata refuses metadata past its bounds, or with keys or values
// that are not printable US-ASCII.
func CheckMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetadataKey || !printable(k) {
			return errorf(Invalid, "file metadata: key %q is not 1-%d bytes of printable US-ASCII", clip(k, 80), MaxMetadataKey)
		}
		if !printable(v) {
			return errorf(Invalid, "file metadata: the value of %q is not printable US-ASCII", clip(k, 80))
		}
		total += len(metadataPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return errorf(Invalid, "file metadata: %d bytes with the prefix of each key, at most %d", total, MaxMetadataBytes)
	}
	return nil
}

// SetMetadata makes md the metadata of the regular file p: keys it held
// and md lacks go (an empty md clears them all). A filesystem that keeps no
// extended attributes is Invalid, naming it, when md is not empty.
func (f *FS) SetMetadata(p string, md map[string]string) error {
	if err := CheckMetadata(md); err != nil {
		return err
	}
	fl, w, _, err := f.OpenRegular(p)
	if err != nil {
		return err
	}
	defer fl.Close()
	sc, err := fl.SyscallConn()
	if err != nil {
		return pathErr(w, err)
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for _, name := range metadataNames(int(fd)) {
			if _, keep := md[strings.TrimPrefix(name, metadataPrefix)]; !keep {
				unix.Fremovexattr(int(fd), name)
			}
		}
		for k, v := range md {
			if serr = unix.Fsetxattr(int(fd), metadataPrefix+k, []byte(v), 0); serr != nil {
				return
			}
		}
	}); err != nil {
		return pathErr(w, err)
	}
	if errors.Is(serr, syscall.ENOTSUP) {
		return errorf(Invalid, "file metadata: the filesystem of '%s' keeps none", w)
	}
	return pathErr(w, serr)
}

// metadataNames lists the metadata attributes of the file open as fd.
func metadataNames(fd int) []string {
	buf := make([]byte, 8192)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil || n == 0 {
		return nil
	}
	var out []string
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if strings.HasPrefix(name, metadataPrefix) && len(name) > len(metadataPrefix) {
			out = append(out, name)
		}
	}
	return out
}

// Metadata returns the metadata of the file at wire path w (not followed
// when a symlink), or nil when it has none or cannot be read.
func (f *FS) Metadata(w string) map[string]string {
	fl, err := f.OpenFile(w, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer fl.Close()
	sc, err := fl.SyscallConn()
	if err != nil {
		return nil
	}
	var out map[string]string
	sc.Control(func(fd uintptr) {
		val := make([]byte, MaxMetadataBytes)
		for _, name := range metadataNames(int(fd)) {
			m, err := unix.Fgetxattr(int(fd), name, val)
			if err != nil {
				continue // set out of band, and longer than metadata may be
			}
			if out == nil {
				out = map[string]string{}
			}
			out[strings.TrimPrefix(name, metadataPrefix)] = string(val[:m])
		}
	})
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
