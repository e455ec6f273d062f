/* Prints the structure layouts and system-call numbers package amd64 describes, as the C
   library headers give them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <ucontext.h>

#define REG(f) printf(#f " %zu\n", offsetof(struct user_regs_struct, f))
#define FP(f) printf(#f " %zu\n", offsetof(struct user_fpregs_struct, f))

int main(void) {
	REG(r15); REG(r14); REG(r13); REG(r12); REG(rbp); REG(rbx); REG(r11); REG(r10);
	REG(r9); REG(r8); REG(rax); REG(rcx); REG(rdx); REG(rsi); REG(rdi); REG(orig_rax);
	REG(rip); REG(cs); REG(eflags); REG(rsp); REG(ss); REG(fs_base); REG(gs_base);
	REG(ds); REG(es); REG(fs); REG(gs);
	printf("user_regs_struct %zu\n", sizeof(struct user_regs_struct));
	FP(ftw); FP(mxcsr); FP(st_space); FP(xmm_space);
	printf("st_slot %zu\n", sizeof(((struct user_fpregs_struct *)0)->st_space) / 8);
	printf("xmm_slot %zu\n", sizeof(((struct user_fpregs_struct *)0)->xmm_space) / 16);
	printf("user_fpregs_struct %zu\n", sizeof(struct user_fpregs_struct));
	printf("SYS_mmap %d\nSYS_munmap %d\nSYS_futex %d\n", SYS_mmap, SYS_munmap, SYS_futex);
	printf("EINTR %d\n", EINTR);
	printf("SYS_rt_sigreturn %d\n", SYS_rt_sigreturn);
	printf("uc_mcontext.gregs %zu\n", offsetof(ucontext_t, uc_mcontext.gregs));
	printf("REG_R8 %d\nREG_R9 %d\nREG_R10 %d\nREG_R11 %d\nREG_R12 %d\nREG_R13 %d\n", REG_R8, REG_R9,
	       REG_R10, REG_R11, REG_R12, REG_R13);
	printf("REG_R14 %d\nREG_R15 %d\nREG_RDI %d\nREG_RSI %d\nREG_RBP %d\nREG_RBX %d\n", REG_R14,
	       REG_R15, REG_RDI, REG_RSI, REG_RBP, REG_RBX);
	printf("REG_RDX %d\nREG_RAX %d\nREG_RCX %d\nREG_RSP %d\nREG_RIP %d\n", REG_RDX, REG_RAX, REG_RCX,
	       REG_RSP, REG_RIP);
	return 0;
}
