package service

import "io/fs"

func modeBits(m uint32) fs.FileMode { return fs.FileMode(m & 0o777) }
