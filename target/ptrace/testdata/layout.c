/* Prints the kernel structure sizes and offsets package ptrace hard-codes for this machine. */
#include <stddef.h>
#include <stdio.h>
#include <sys/user.h>

int main(void) {
	printf("gregs %zu\n", sizeof(struct user_regs_struct));
	printf("fpregs %zu\n", sizeof(struct user_fpregs_struct));
	printf("orig_rax %zu\n", offsetof(struct user_regs_struct, orig_rax));
	printf("rip %zu\n", offsetof(struct user_regs_struct, rip));
	printf("u_debugreg %zu\n", offsetof(struct user, u_debugreg));
	return 0;
}
