#include "textflag.h"

// func int80getpid() uint32
// getpid (20) through the i386 ABI.
TEXT ·int80getpid(SB), NOSPLIT, $0-4
	MOVL $20, AX
	INT $0x80
	MOVL AX, ret+0(FP)
	RET
