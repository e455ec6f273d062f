package symbols

import "debug/dwarf"

// DWARF codes the standard library does not name (GNU extensions and pre-standard forms).
const (
	tagGNUCallSite          dwarf.Tag  = 0x4109
	tagGNUCallSiteParameter dwarf.Tag  = 0x410a
	attrGNUCallSiteValue    dwarf.Attr = 0x2111
	attrGNUCallSiteTarget   dwarf.Attr = 0x2113
	attrGNUTailCall         dwarf.Attr = 0x2115
	attrMIPSLinkageName     dwarf.Attr = 0x2007

	ntAUXV = 6 // core note type of the auxiliary vector
)
