"""The merge engine (DESIGN §6): rank correspondence, anchors, alignment, counter transfer and the merge's verdict."""
