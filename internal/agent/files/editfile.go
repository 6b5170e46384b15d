// This file implements EditFile's I/O: read the file, apply the edit
// (edit.go), and replace the file atomically, its mode and owner kept.

package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/textedit"
)

// MaxEditFile is the largest file EditFile takes.
const MaxEditFile = 64 << 20

// EditResult says what an edit did (textedit.Result).
type EditResult = textedit.Result

// EditFile replaces old with new in file p (see package textedit for how old is
// found) and reports what it did. A symlink is followed: the file it leads
// to is edited, the link stays. Nothing is written when the edit fails; the
// new text goes to a temporary file in the same directory, given the file's
// mode and owner, and renamed over it, so a reader sees the old text or the
// new, never a mix. (The file becomes a new inode: hard links to it keep
// the old text, and extended attributes are not carried over.)
func (f *FS) EditFile(p, old, new string, replaceAll bool) (EditResult, error) {
	switch {
	case old == "":
		return EditResult{}, errorf(Invalid, "old_string is empty")
	case old == new:
		return EditResult{}, errorf(Invalid, "old_string and new_string are the same")
	}
	w, err := f.Clean(p)
	if err != nil {
		return EditResult{}, err
	}
	if w, err = f.resolveLinks(w); err != nil {
		return EditResult{}, err
	}
	fl, w, st, err := f.OpenRegular(w)
	if err != nil {
		return EditResult{}, err
	}
	defer fl.Close()
	if st.Size() > MaxEditFile {
		return EditResult{}, errorf(TooLarge, "path '%s' is %d bytes; files over %d MiB are not edited", w, st.Size(), MaxEditFile>>20)
	}
	content, err := io.ReadAll(io.LimitReader(fl, MaxEditFile+1))
	if err != nil {
		return EditResult{}, pathErr(w, err)
	}
	if len(content) > MaxEditFile {
		return EditResult{}, errorf(TooLarge, "path '%s' grew past %d MiB while being read; files over it are not edited", w, MaxEditFile>>20)
	}
	if bytes.IndexByte(content[:min(len(content), binaryProbe)], 0) >= 0 {
		return EditResult{}, errorf(Precondition, "path '%s' is a binary file", w)
	}
	out, res, err := textedit.Apply(w, string(content), old, new, replaceAll)
	if err != nil {
		return EditResult{}, errorf(Invalid, "%s", err)
	}
	if err := f.replaceFile(w, []byte(out), st); err != nil {
		return EditResult{}, err
	}
	return res, nil
}

// maxLinks bounds the symlinks resolveLinks follows, as the kernel does.
const maxLinks = 40

// resolveLinks returns the wire path a chain of symlinks from w leads to
// (w itself when it is not one, or does not exist).
func (f *FS) resolveLinks(w string) (string, error) {
	for range maxLinks {
		fi, err := f.lstat(w)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return w, nil // OpenRegular reports what is wrong
		}
		target, err := f.readlink(w)
		if err != nil {
			return "", pathErr(w, err)
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(w), target)
		}
		w = path.Clean(target)
	}
	return "", errorf(Invalid, "path '%s': too many levels of symbolic links", w)
}

// replaceFile replaces file w (described by st) with content: written to a
// temporary file beside it, given st's mode and owner, then renamed over it.
func (f *FS) replaceFile(w string, content []byte, st fs.FileInfo) error {
	var (
		tmp string
		fl  *os.File
		err error
	)
	for range 10 {
		tmp = path.Join(path.Dir(w), fmt.Sprintf(".%s.sbx-edit-%d", path.Base(w), time.Now().UnixNano()%1e9))
		fl, err = f.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if KindOf(err) != Exists {
			break
		}
	}
	if err != nil {
		return err
	}
	werr := writeAs(fl, content, st)
	if cerr := fl.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		if f.root == nil {
			werr = renameNoMagic(tmp, w)
		} else {
			werr = f.root.Rename(rel(tmp), rel(w))
		}
	}
	if werr != nil {
		f.Remove(tmp)
		return pathErr(w, werr)
	}
	return nil
}

// writeAs writes content to fl and gives it st's owner, then its mode (a
// chown clears the set-id bits). An agent that may not chown (not root)
// leaves the file its own.
func writeAs(fl *os.File, content []byte, st fs.FileInfo) error {
	if _, err := fl.Write(content); err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if err := fl.Chown(int(sys.Uid), int(sys.Gid)); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	return fl.Chmod(st.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
}
