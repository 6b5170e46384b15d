package seccomp

// int80getpid calls getpid through the i386 ABI (int $0x80).
func int80getpid() uint32
