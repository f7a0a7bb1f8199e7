//! The double binary tree the runtime's Tree algorithm runs on (NCCL 2.28.9 `src/graph/trees.cc`,
//! `ncclGetBtree`/`ncclGetDtree`), over rank indices, in the shape the primitives walk.

use collscope_nccl::graph::trees;

/// A rank's place in one tree: parent and up to two children (-1 for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TreeNode {
    pub up: i32,
    pub down: [i32; 2],
}

impl TreeNode {
    pub(crate) fn children(&self) -> impl Iterator<Item = u32> + '_ {
        self.down.iter().filter(|&&d| d >= 0).map(|&d| d as u32)
    }
}

impl From<trees::TreeLink> for TreeNode {
    fn from(l: trees::TreeLink) -> Self {
        TreeNode { up: l.up, down: [l.down0, l.down1] }
    }
}

/// Both trees of the double binary tree over ranks, from the graph module's `ncclGetDtree`.
pub(crate) fn dtree(nranks: i32, rank: i32) -> [TreeNode; 2] {
    let (first, second) = trees::dtree(nranks, rank);
    [first.into(), second.into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_nccls_pictures_and_is_consistent() {
        // trees.cc's 14-rank picture: 8's children are 4 and 12, 13's parent is 12.
        assert_eq!(dtree(14, 8)[0], TreeNode { up: 0, down: [4, 12] });
        assert_eq!(dtree(14, 13)[0].up, 12);
        assert_eq!(dtree(14, 0)[0], TreeNode { up: -1, down: [-1, 8] });
        // Mirror for 12 ranks: rank 11 (the mirror of 0) roots the second tree, with 3 as its child.
        assert_eq!(dtree(12, 11)[1], TreeNode { up: -1, down: [-1, 3] });
        for n in 1..=17 {
            for t in 0..2 {
                let mut roots = 0;
                for r in 0..n {
                    let node = dtree(n, r)[t];
                    if node.up == -1 {
                        roots += 1;
                    } else {
                        assert!(dtree(n, node.up)[t].down.contains(&r), "n {n} tree {t} rank {r}");
                    }
                    for c in node.children() {
                        assert_eq!(dtree(n, c as i32)[t].up, r);
                    }
                }
                assert_eq!(roots, 1, "n {n} tree {t}");
            }
        }
    }
}
