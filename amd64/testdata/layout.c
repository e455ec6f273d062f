/* Prints the structure layouts and system-call numbers package amd64 describes, as the C
   library headers give them. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/user.h>

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
	return 0;
}
