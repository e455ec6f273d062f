package threaddb

import (
	"errors"
	"fmt"
)

var (
	// ErrTLSNotAllocated means the thread has not allocated the module's TLS block yet (dynamic
	// TLS is allocated on first use): the thread cannot have seen any value but the initial image
	// in the module's PT_TLS segment. libthread_db calls this TD_TLSDEFER.
	ErrTLSNotAllocated = errors.New("threaddb: thread has not allocated this module's TLS block yet")
	// ErrBadKey means a pthread_key_t that is out of range or not created (libthread_db's TD_BADKEY).
	ErrBadKey = errors.New("threaddb: no such thread-specific data key")
	// ErrNoTLSModule means the module has no TLS block (no PT_TLS segment, or not loaded).
	ErrNoTLSModule = errors.New("threaddb: module has no TLS block")
)

// Specific returns the thread's value for a thread-specific data key, as pthread_getspecific
// would return it in that thread: 0 when the thread has set no value or the value belongs to an
// earlier key with the same number. It follows libthread_db's td_thr_tsd.
func (p *Process) Specific(t Thread, key uint32) (uint64, error) {
	fail := func(err error) (uint64, error) {
		return 0, fmt.Errorf("threaddb: thread-specific data key %d of LWP %d: %w", key, t.LWP, err)
	}
	if p.lib == nil {
		return fail(ErrNoThreadLibrary)
	}
	pd := t.Pthread
	if pd == 0 {
		// The initial thread before initialisation: keys cannot have values yet.
		return fail(ErrNotInitialized)
	}
	keys, ok := p.vars["__pthread_keys"]
	if !ok {
		return fail(fmt.Errorf("no __pthread_keys symbol in the loaded modules"))
	}
	keysDesc, ok := p.lib.descs["__pthread_keys"]
	if !ok {
		return fail(fmt.Errorf("descriptor %s__pthread_keys missing", DescPrefix))
	}
	if keysDesc.Count != 0 && uint64(key) >= uint64(keysDesc.Count) {
		return fail(ErrBadKey)
	}
	entry, err := keysDesc.ElemAddr(keys, uint64(key))
	if err != nil {
		return fail(err)
	}
	keySeq, err := p.fetch("pthread_key_struct_seq", entry, 0, "__pthread_keys[key].seq")
	if err != nil {
		return fail(err)
	}
	if keySeq&1 == 0 {
		// An even sequence number marks a free slot.
		return fail(ErrBadKey)
	}
	level2, ok := p.lib.descs["pthread_key_data_level2_data"]
	if !ok || level2.Count == 0 {
		return fail(fmt.Errorf("descriptor %spthread_key_data_level2_data missing or empty", DescPrefix))
	}
	idx1, idx2 := uint64(key)/uint64(level2.Count), uint64(key)%uint64(level2.Count)

	// struct pthread's specific member is an array of pointers to second-level blocks. glibc
	// describes it as one field whose size is the whole array (for example {2048, 1, 784}), so the
	// elements are pointer-sized; an array-style descriptor is accepted too.
	spec, ok := p.lib.descs["pthread_specific"]
	if !ok {
		return fail(fmt.Errorf("descriptor %spthread_specific missing", DescPrefix))
	}
	ptrBits := uint32(8 * p.lib.PtrSize)
	nelem := uint64(spec.Count)
	if spec.Bits != ptrBits {
		nelem = uint64(spec.Bits) / uint64(ptrBits) * uint64(max(spec.Count, 1))
	}
	if idx1 >= nelem {
		return fail(ErrBadKey)
	}
	l1, err := p.readWord(pd+uint64(spec.Offset)+idx1*uint64(p.lib.PtrSize), "struct pthread specific[]")
	if err != nil {
		return fail(err)
	}
	if l1 == 0 {
		return 0, nil
	}
	slot, err := level2.ElemAddr(l1, idx2)
	if err != nil {
		return fail(err)
	}
	size, ok := p.lib.sizes["pthread_key_data"]
	if !ok || size == 0 || size > 256 {
		return fail(fmt.Errorf("no usable %ssizeof_pthread_key_data", DescPrefix))
	}
	buf := make([]byte, size)
	if err := p.read(slot, buf, "struct pthread_key_data"); err != nil {
		return fail(err)
	}
	seq, err := p.local("pthread_key_data_seq", buf, slot, slot, 0)
	if err != nil {
		return fail(err)
	}
	if seq != keySeq {
		return 0, nil
	}
	v, err := p.local("pthread_key_data_data", buf, slot, slot, 0)
	if err != nil {
		return fail(err)
	}
	return v, nil
}

// slotinfoListHead returns the first dtv_slotinfo_list node.
func (p *Process) slotinfoListHead() (uint64, error) {
	if !p.lib.Static {
		rg, err := p.rtldGlobal()
		if err != nil {
			return 0, err
		}
		return p.fetch("rtld_global__dl_tls_dtv_slotinfo_list", rg, 0, "_rtld_global._dl_tls_dtv_slotinfo_list")
	}
	v, ok := p.vars["_dl_tls_dtv_slotinfo_list"]
	if !ok {
		return 0, fmt.Errorf("no _dl_tls_dtv_slotinfo_list symbol in %s", p.lib.Module.Path)
	}
	if _, ok := p.lib.descs["_dl_tls_dtv_slotinfo_list"]; ok {
		return p.fetch("_dl_tls_dtv_slotinfo_list", v, 0, "_dl_tls_dtv_slotinfo_list")
	}
	return p.readWord(v, "_dl_tls_dtv_slotinfo_list")
}

// slotinfo is one entry of the dynamic linker's TLS module table.
type slotinfo struct {
	modid   uint64
	gen     uint64
	linkMap uint64
}

// slotChunk is how many TLS slot entries one read covers.
const slotChunk = 256

// eachSlot calls fn for every TLS module slot in order of module id until fn returns true.
func (p *Process) eachSlot(fn func(s slotinfo) (bool, error)) error {
	node, err := p.slotinfoListHead()
	if err != nil {
		return err
	}
	elem, ok := p.lib.descs["dtv_slotinfo_list_slotinfo"]
	if !ok {
		return fmt.Errorf("descriptor %sdtv_slotinfo_list_slotinfo missing", DescPrefix)
	}
	if elem.Bits%8 != 0 || elem.Bytes() == 0 || elem.Bytes() > 256 {
		return fmt.Errorf("descriptor %sdtv_slotinfo_list_slotinfo %v is implausible", DescPrefix, elem)
	}
	var base uint64
	for hops := 0; node != 0; hops++ {
		if hops > 1<<16 {
			return fmt.Errorf("dtv_slotinfo_list: more than %d nodes (corrupt list)", 1<<16)
		}
		n, err := p.fetch("dtv_slotinfo_list_len", node, 0, "dtv_slotinfo_list.len")
		if err != nil {
			return err
		}
		if n > 1<<20 {
			return fmt.Errorf("dtv_slotinfo_list node %#x: implausible length %d", node, n)
		}
		// Read the entries in chunks rather than one by one: most slots are empty.
		for i := uint64(0); i < n; i += slotChunk {
			k := min(slotChunk, n-i)
			start, err := elem.ElemAddr(node, i)
			if err != nil {
				return err
			}
			buf := make([]byte, k*elem.Bytes())
			if err := p.read(start, buf, "dtv_slotinfo_list.slotinfo[]"); err != nil {
				return err
			}
			for j := uint64(0); j < k; j++ {
				if base+i+j == 0 {
					continue // module ids start at 1; slot 0 is not a module
				}
				entry := start + j*elem.Bytes()
				m, err := p.local("dtv_slotinfo_map", buf, start, entry, 0)
				if err != nil {
					return err
				}
				if m == 0 {
					continue
				}
				g, err := p.local("dtv_slotinfo_gen", buf, start, entry, 0)
				if err != nil {
					return err
				}
				done, err := fn(slotinfo{modid: base + i + j, gen: g, linkMap: m})
				if err != nil || done {
					return err
				}
			}
		}
		base += n
		if node, err = p.fetch("dtv_slotinfo_list_next", node, 0, "dtv_slotinfo_list.next"); err != nil {
			return err
		}
	}
	return nil
}

// slot returns the slotinfo of one module id (glibc's dtv_slotinfo, without reading the other
// entries).
func (p *Process) slot(modid uint64) (slotinfo, error) {
	node, err := p.slotinfoListHead()
	if err != nil {
		return slotinfo{}, err
	}
	elem, ok := p.lib.descs["dtv_slotinfo_list_slotinfo"]
	if !ok {
		return slotinfo{}, fmt.Errorf("descriptor %sdtv_slotinfo_list_slotinfo missing", DescPrefix)
	}
	var base uint64
	for hops := 0; ; hops++ {
		if node == 0 {
			return slotinfo{}, fmt.Errorf("module id %d: %w", modid, ErrNoTLSModule)
		}
		if hops > 1<<16 {
			return slotinfo{}, fmt.Errorf("dtv_slotinfo_list: more than %d nodes (corrupt list)", 1<<16)
		}
		n, err := p.fetch("dtv_slotinfo_list_len", node, 0, "dtv_slotinfo_list.len")
		if err != nil {
			return slotinfo{}, err
		}
		if modid < base+n {
			break
		}
		base += n
		if node, err = p.fetch("dtv_slotinfo_list_next", node, 0, "dtv_slotinfo_list.next"); err != nil {
			return slotinfo{}, err
		}
	}
	addr, err := elem.ElemAddr(node, modid-base)
	if err != nil {
		return slotinfo{}, err
	}
	s := slotinfo{modid: modid}
	if s.linkMap, err = p.fetch("dtv_slotinfo_map", addr, 0, "dtv_slotinfo.map"); err != nil {
		return slotinfo{}, err
	}
	if s.linkMap == 0 {
		return slotinfo{}, fmt.Errorf("module id %d: %w", modid, ErrNoTLSModule)
	}
	if s.gen, err = p.fetch("dtv_slotinfo_gen", addr, 0, "dtv_slotinfo.gen"); err != nil {
		return slotinfo{}, err
	}
	return s, nil
}

// ModuleID returns the TLS module id the dynamic linker gave a module, found by matching the
// link_map load address (l_addr, the first member of the public struct link_map) of each TLS
// module against the module's load bias. The main executable's id is 1 when it has a PT_TLS
// segment.
func (p *Process) ModuleID(m Module) (uint64, error) {
	if p.lib == nil {
		return 0, fmt.Errorf("threaddb: TLS module id of %s: %w", m.Path, ErrNoThreadLibrary)
	}
	id, err := p.scanModuleID(m)
	if err == nil {
		p.mu.Lock()
		p.modIDs[m] = id
		p.mu.Unlock()
	}
	return id, err
}

// scanModuleID searches the TLS module table for the module.
func (p *Process) scanModuleID(m Module) (uint64, error) {
	var ids []uint64
	err := p.eachSlot(func(s slotinfo) (bool, error) {
		lAddr, err := p.readWord(s.linkMap, "link_map.l_addr")
		if err != nil {
			return false, err
		}
		if lAddr == m.Bias {
			ids = append(ids, s.modid)
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("threaddb: TLS module id of %s: %w", m.Path, err)
	}
	switch len(ids) {
	case 0:
		return 0, fmt.Errorf("threaddb: TLS module id of %s (bias %#x): %w", m.Path, m.Bias, ErrNoTLSModule)
	case 1:
		return ids[0], nil
	}
	return 0, fmt.Errorf("threaddb: TLS module id of %s: modules %v share load bias %#x", m.Path, ids, m.Bias)
}

// TLSBlock returns the address of a thread's TLS block for a module id, as libthread_db's
// td_thr_tlsbase does: through the thread's DTV when it is current, else from the module's static
// TLS offset. ErrTLSNotAllocated means the block does not exist yet for this thread.
func (p *Process) TLSBlock(t Thread, modid uint64) (uint64, error) {
	base, _, err := p.tlsBlock(t, modid)
	return base, err
}

// tlsBlock is TLSBlock, also returning the module's slot.
func (p *Process) tlsBlock(t Thread, modid uint64) (uint64, slotinfo, error) {
	var s slotinfo
	fail := func(err error) (uint64, slotinfo, error) {
		return 0, s, fmt.Errorf("threaddb: TLS block of module %d for LWP %d: %w", modid, t.LWP, err)
	}
	if p.lib == nil {
		return fail(ErrNoThreadLibrary)
	}
	if modid < 1 {
		return fail(ErrNoTLSModule)
	}
	pd := t.Pthread
	if pd == 0 {
		// The initial thread before initialisation: try its thread register, as libthread_db
		// does; a register that is still 0 means TLS has not been set up.
		if p.thr == nil || t.LWP == 0 {
			return fail(ErrTLSNotAllocated)
		}
		tp, err := p.thr.ThreadPointer(t.LWP)
		if err != nil {
			return fail(err)
		}
		if tp == 0 {
			return fail(ErrTLSNotAllocated)
		}
		if pd, err = p.pthreadFromTP(tp); err != nil {
			return fail(err)
		}
	}
	s, err := p.slot(modid)
	if err != nil {
		return fail(err)
	}
	dtv, err := p.fetch("pthread_dtvp", pd, 0, "struct pthread dtv pointer")
	if err != nil {
		return fail(err)
	}
	dtvDesc, ok := p.lib.descs["dtv_dtv"]
	if !ok {
		return fail(fmt.Errorf("descriptor %sdtv_dtv missing", DescPrefix))
	}
	gen0, err := dtvDesc.ElemAddr(dtv, 0)
	if err != nil {
		return fail(err)
	}
	dtvGen, err := p.fetch("dtv_t_counter", gen0, 0, "dtv[0].counter")
	if err != nil {
		return fail(err)
	}
	if dtvGen >= s.gen {
		slotAddr, err := dtvDesc.ElemAddr(dtv, modid)
		if err != nil {
			return fail(err)
		}
		ptr, err := p.fetch("dtv_t_pointer_val", slotAddr, 0, "dtv[modid].pointer.val")
		if err != nil {
			return fail(err)
		}
		// TLS_DTV_UNALLOCATED is (void *) -1; any odd value means "not allocated here".
		if ptr&1 == 0 {
			return ptr, s, nil
		}
	}
	// The DTV is older than the module, or its slot is unallocated: a module in static TLS is
	// still reachable from the thread pointer.
	off, err := p.fetch("link_map_l_tls_offset", s.linkMap, 0, "link_map.l_tls_offset")
	if err != nil {
		return fail(err)
	}
	tlsOff := int64(off)
	lay := p.lib.tlsLayout()
	if tlsOff == lay.noTLSOffset || tlsOff == lay.forcedDynamic {
		return fail(ErrTLSNotAllocated)
	}
	base, err := p.staticTLSBlock(pd, tlsOff)
	if err != nil {
		return fail(err)
	}
	return base, s, nil
}

// TLSAddress returns the address of a thread-local variable: the thread's TLS block for the
// module plus the variable's offset in it (the operand of DWARF's DW_OP_form_tls_address, or an
// STT_TLS symbol's value).
//
// The module id found for a module is remembered for the Process's life (module ids change only
// when modules are unloaded, and Open must then be called again), and checked on each use against
// the link map the id leads to.
func (p *Process) TLSAddress(t Thread, m Module, offset uint64) (uint64, error) {
	if p.lib == nil {
		return 0, fmt.Errorf("threaddb: TLS address in %s for LWP %d: %w", m.Path, t.LWP, ErrNoThreadLibrary)
	}
	p.mu.Lock()
	id, cached := p.modIDs[m]
	p.mu.Unlock()
	if !cached {
		var err error
		if id, err = p.ModuleID(m); err != nil {
			return 0, err
		}
	}
	base, s, err := p.tlsBlock(t, id)
	if err == nil && cached {
		// The remembered id must still lead to this module.
		var lAddr uint64
		if lAddr, err = p.readWord(s.linkMap, "link_map.l_addr"); err == nil && lAddr != m.Bias {
			p.mu.Lock()
			delete(p.modIDs, m)
			p.mu.Unlock()
			return p.TLSAddress(t, m, offset)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("threaddb: TLS address in %s for LWP %d: %w", m.Path, t.LWP, err)
	}
	return base + offset, nil
}
