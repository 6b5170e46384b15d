package e2e

import "os"

func readHostFile(p string) ([]byte, error) { return os.ReadFile(p) }
