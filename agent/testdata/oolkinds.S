/* oolkinds: one instruction of each kind an agent must pass after a breakpoint on it, each
 * under a global label (ool_*) in a function ool.c calls. A pass that gets one wrong changes
 * what ool prints. */
	.text

/* long k_load(long i): counter + table[i & 3] + 1 (RIP-relative load and lea, push, pop). */
	.globl k_load, ool_load, ool_lea, ool_pop, ool_ret
k_load:
ool_load:
	mov counter(%rip), %rax
ool_lea:
	lea table(%rip), %rdx
	and $3, %rdi
	add (%rdx,%rdi,8), %rax
	push %rax
	xor %eax, %eax
ool_pop:
	pop %rax
	inc %rax
ool_ret:
	ret

/* void k_store(long v): counter += v + 3 (RIP-relative store, and an add of an immediate that
 * follows the displacement in the instruction). */
	.globl k_store, ool_store, ool_addimm
k_store:
	mov counter(%rip), %rax
	add %rdi, %rax
ool_store:
	mov %rax, counter(%rip)
ool_addimm:
	addq $3, counter(%rip)
	ret

/* long k_call(long x): leaf(leaf(leaf(x))) by a relative call, a call through a register and
 * a call through a RIP-relative pointer. */
	.globl k_call, ool_call, ool_callreg, ool_callmem
k_call:
	push %rbx
ool_call:
	call leaf
	mov %rax, %rdi
	lea leaf(%rip), %rbx
ool_callreg:
	call *%rbx
	mov %rax, %rdi
ool_callmem:
	call *fptr(%rip)
	pop %rbx
	ret

/* long k_branch(long x): (x odd ? x*10 : x+7), less 100 unless below 100 (jcc with 8- and
 * 32-bit displacements, taken and not, and jmp). */
	.globl k_branch, ool_jcc8, ool_jmp, ool_jcc32
k_branch:
	mov %rdi, %rax
	test $1, %dil
ool_jcc8:
	jne 1f
	add $7, %rax
ool_jmp:
	jmp 2f
1:	imul $10, %rax
2:	cmp $100, %rax
ool_jcc32:
	.byte 0x0f, 0x8c		/* jl rel32 */
	.long 3f - . - 4
	sub $100, %rax
3:	ret

/* double k_sse(double x): x + x*half (SSE: a RIP-relative load, then register operands). */
	.globl k_sse, ool_sse_load, ool_sse_add
k_sse:
ool_sse_load:
	movsd half(%rip), %xmm1
	mulsd %xmm0, %xmm1
ool_sse_add:
	addsd %xmm1, %xmm0
	ret

/* long k_getpid(void): the getpid system call. */
	.globl k_getpid, ool_syscall
k_getpid:
	mov $39, %eax
ool_syscall:
	syscall
	ret

/* void k_bump(long t, long i): one more to total, atomically (a locked RIP-relative add with an
 * immediate), from every thread. */
	.globl k_bump, ool_bump
k_bump:
ool_bump:
	lock addq $1, total(%rip)
	ret

	.section .note.GNU-stack,"",@progbits
