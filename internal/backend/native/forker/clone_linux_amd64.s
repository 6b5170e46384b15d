#include "textflag.h"

// Offsets of childPlan's fields (clone_linux_amd64.go checks them).
#define PLAN_PATH 0
#define PLAN_ARGV 8
#define PLAN_ENVP 16
#define PLAN_SYNC 24
#define PLAN_ERR 32
#define PLAN_SETIDS 40
#define PLAN_FDS 48
#define PLAN_NFDS 56
#define PLAN_MASK 64
#define PLAN_DFL 72

#define SYS_read 0
#define SYS_write 1
#define SYS_close 3
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_execve 59
#define SYS_fcntl 72
#define SYS_setsid 112
#define SYS_setgroups 116
#define SYS_setresuid 117
#define SYS_setresgid 119
#define SYS_exit_group 231
#define SYS_dup3 292
#define SYS_clone3 435

// ZEROS(nr) makes system call nr with three zero arguments; on an error it
// goes to fail.
#define ZEROS(nr) \
	XORQ	DI, DI \
	XORQ	SI, SI \
	XORQ	DX, DX \
	MOVQ	$nr, AX \
	SYSCALL \
	CMPQ	AX, $0 \
	JNE	fail

// func rawClone3(args *cloneArgs, plan *childPlan) int64
//
// clone3(args, sizeof *args). The parent gets the child's pid, or -errno. The
// child starts on the stack args names, sharing this process's memory, and
// runs only the code below, which touches nothing but plan and its own
// stack: no Go code, no Go stack, no thread-local state. It sets every
// signal's handler back to the default (it has a copy of the runtime's, and
// every signal blocked, from the calling thread), starts a session, waits
// for the parent's byte on plan's sync pipe if there is one (its uid and
// gid maps written), takes root's ids, puts its files in place, unblocks
// its signals and execs. On failure it writes the errno (4 bytes) to plan's
// error pipe and exits 253; if the parent closes the sync pipe instead of
// writing, it exits 253 silently.
TEXT ·rawClone3(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ	args+0(FP), DI
	MOVQ	plan+8(FP), R12
	MOVQ	$88, SI
	MOVQ	$SYS_clone3, AX
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	MOVQ	AX, ret+16(FP)
	RET

child:
	SUBQ	$64, SP

	// Default handlers for every signal but SIGKILL and SIGSTOP.
	MOVQ	$1, R13
sig:
	CMPQ	R13, $9
	JEQ	signext
	CMPQ	R13, $19
	JEQ	signext
	MOVQ	R13, DI
	MOVQ	PLAN_DFL(R12), SI
	XORQ	DX, DX
	MOVQ	$8, R10
	MOVQ	$SYS_rt_sigaction, AX
	SYSCALL
signext:
	INCQ	R13
	CMPQ	R13, $65
	JLT	sig

	MOVQ	$SYS_setsid, AX
	SYSCALL
	CMPQ	AX, $0
	JLT	fail

	// Wait for the parent's byte.
	MOVQ	PLAN_SYNC(R12), DI
	CMPQ	DI, $0
	JLT	ids
	MOVQ	SP, SI
	MOVQ	$1, DX
	MOVQ	$SYS_read, AX
	SYSCALL
	CMPQ	AX, $1
	JNE	abort

ids:
	MOVQ	PLAN_SETIDS(R12), AX
	CMPQ	AX, $0
	JEQ	fds
	ZEROS(SYS_setgroups) // setgroups(0, NULL)
	ZEROS(SYS_setresgid)
	ZEROS(SYS_setresuid)

	// fds[i] becomes descriptor i: closed where it is -1. Every source is
	// at or above nfds (the parent duplicated them there), so no move
	// overwrites a source still to be moved.
fds:
	XORQ	R13, R13
fdloop:
	CMPQ	R13, PLAN_NFDS(R12)
	JGE	mask
	MOVQ	PLAN_FDS(R12), R14
	MOVQ	(R14)(R13*8), DI
	CMPQ	DI, $-1
	JNE	dup
	MOVQ	R13, DI
	MOVQ	$SYS_close, AX
	SYSCALL
	JMP	fdnext
dup:
	MOVQ	R13, SI
	XORQ	DX, DX
	MOVQ	$SYS_dup3, AX
	SYSCALL
	CMPQ	AX, $0
	JLT	fail
fdnext:
	INCQ	R13
	JMP	fdloop

mask:
	MOVQ	PLAN_MASK(R12), AX
	MOVQ	AX, 0(SP)
	MOVQ	$2, DI // SIG_SETMASK
	MOVQ	SP, SI
	XORQ	DX, DX
	MOVQ	$8, R10
	MOVQ	$SYS_rt_sigprocmask, AX
	SYSCALL
	CMPQ	AX, $0
	JNE	fail

	MOVQ	PLAN_PATH(R12), DI
	MOVQ	PLAN_ARGV(R12), SI
	MOVQ	PLAN_ENVP(R12), DX
	MOVQ	$SYS_execve, AX
	SYSCALL

fail:
	NEGQ	AX
	MOVL	AX, 8(SP)
	MOVQ	PLAN_ERR(R12), DI
	LEAQ	8(SP), SI
	MOVQ	$4, DX
	MOVQ	$SYS_write, AX
	SYSCALL
abort:
	MOVQ	$253, DI
	MOVQ	$SYS_exit_group, AX
	SYSCALL
	JMP	abort
