package sandbox

// ArchiveLimits lowers the caps of one archive extraction below the agent's
// own; zero fields leave the agent's cap.
type ArchiveLimits struct {
	MaxBytes   int64 // uncompressed archive bytes
	MaxEntries int64
	// QuotaBytes is the sandbox's disk quota, which bounds the bytes one
	// extraction writes whatever MaxBytes says. The manager sets it.
	QuotaBytes int64
}

// ArchiveSkip is an archive entry an extraction left out, and why.
type ArchiveSkip struct {
	Name   string
	Type   string // "char device", "block device", "fifo", …
	Reason string
}

// ArchiveResult says what an archive extraction wrote.
type ArchiveResult struct {
	Path    string // the destination directory
	Entries int64  // archive entries written
	Bytes   int64  // file content written
	// Skipped lists the first entries left out; SkippedCount counts them all.
	Skipped      []ArchiveSkip
	SkippedCount int64
}
