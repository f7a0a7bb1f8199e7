//! The double binary tree across nodes: NCCL 2.28.9 `src/graph/trees.cc` (`ncclGetBtree`, `ncclGetDtree`).
//! Node 0 roots the first tree; bit arithmetic on node indices gives parents and children. The second tree
//! mirrors the first (`n-1-x`) when the node count is even and shifts it by one when odd, so that every node
//! is a leaf in one tree and an inner node in the other.

/// One node's place in one binary tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLink {
    /// Parent node, -1 at the root.
    pub up: i32,
    /// First and second child, -1 where absent.
    pub down0: i32,
    pub down1: i32,
    /// 0 when this node is its parent's first (smaller) child, 1 when the second; 0 at the root.
    pub child_type: u8,
}

/// `ncclGetBtree`: a tree over `n` nodes rooted at 0 whose inner nodes are the even numbers.
pub fn btree(n: i32, node: i32) -> TreeLink {
    let mut bit = 1;
    while bit < n && bit & node == 0 {
        bit <<= 1;
    }
    if node == 0 {
        let down1 = if n > 1 { bit >> 1 } else { -1 };
        return TreeLink { up: -1, down0: -1, down1, child_type: 0 };
    }
    let mut up = (node ^ bit) | (bit << 1);
    if up >= n {
        up = node ^ bit;
    }
    let child_type = if node < up { 0 } else { 1 };
    let mut low = bit >> 1;
    let down0 = if low == 0 { -1 } else { node - low };
    let mut down1 = if low == 0 { -1 } else { node + low };
    // Walk the second child down by halving its offset until it is inside the tree.
    while down1 >= n {
        down1 = if low == 0 { -1 } else { node + low };
        low >>= 1;
    }
    TreeLink { up, down0, down1, child_type }
}

/// `ncclGetDtree`: this node's links in both trees.
pub fn dtree(n: i32, node: i32) -> (TreeLink, TreeLink) {
    let first = btree(n, node);
    let (map_in, map_out): (i32, fn(i32, i32) -> i32) =
        if n & 1 == 1 { ((node - 1 + n) % n, |x, n| (x + 1) % n) } else { (n - 1 - node, |x, n| n - 1 - x) };
    let t = btree(n, map_in);
    let map = |x: i32| if x == -1 { -1 } else { map_out(x, n) };
    let second = TreeLink { up: map(t.up), down0: map(t.down0), down1: map(t.down1), child_type: t.child_type };
    (first, second)
}

/// NCCL's approximate tree depth (`connectTrees`): the chain inside a node plus log2 of the node count.
pub fn tree_depth(nranks: i32, nnodes: i32) -> i32 {
    nranks / nnodes - 1 + log2i(nnodes)
}

/// `log2i`: floor of log2, 0 for n <= 1.
fn log2i(mut n: i32) -> i32 {
    let mut l = 0;
    while n > 1 {
        n >>= 1;
        l += 1;
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parent of every node in the first tree, n = 1..17, worked out by hand from the rule: take the lowest
    /// set bit b of x, the parent is (x ^ b) | 2b, or x ^ b when that is out of range.
    const BTREE_UP: [&[i32]; 17] = [
        &[-1],
        &[-1, 0],
        &[-1, 2, 0],
        &[-1, 2, 0, 2],
        &[-1, 2, 4, 2, 0],
        &[-1, 2, 4, 2, 0, 4],
        &[-1, 2, 4, 2, 0, 6, 4],
        &[-1, 2, 4, 2, 0, 6, 4, 6],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 8],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 8],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 8, 10],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 14, 12],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 14, 12, 14],
        &[-1, 2, 4, 2, 8, 6, 4, 6, 16, 10, 12, 10, 8, 14, 12, 14, 0],
    ];

    /// Parents in the second tree, by hand: mirrored (n-1-up(n-1-x)) for even n, shifted (up(x-1)+1) for odd.
    const DTREE_UP: [(i32, &[i32]); 7] = [
        (1, &[-1]),
        (2, &[1, -1]),
        (3, &[1, -1, 0]),
        (4, &[1, 3, 1, -1]),
        (5, &[1, -1, 3, 0, 3]),
        (8, &[1, 3, 1, 7, 5, 3, 5, -1]),
        (13, &[9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11]),
    ];

    fn children(t: TreeLink) -> Vec<i32> {
        [t.down0, t.down1].into_iter().filter(|&d| d >= 0).collect()
    }

    #[test]
    fn btree_parents_match_hand_tables_and_children_agree() {
        for (i, ups) in BTREE_UP.iter().enumerate() {
            let n = i as i32 + 1;
            for x in 0..n {
                let t = btree(n, x);
                assert_eq!(t.up, ups[x as usize], "n={n} node={x} up");
                let expect: Vec<i32> = (0..n).filter(|&c| ups[c as usize] == x).collect();
                let mut got = children(t);
                got.sort();
                assert_eq!(got, expect, "n={n} node={x} children");
                if t.down0 >= 0 {
                    assert!(t.down0 < x, "first child is the smaller one");
                }
                if t.up >= 0 {
                    assert_eq!(t.child_type, u8::from(x > t.up), "n={n} node={x} child type");
                }
            }
        }
    }

    #[test]
    fn nccl_comment_examples() {
        // trees.cc illustration, 14 nodes: 13 hangs under 12 because 14 is out of range; 12 has 10 and 13.
        assert_eq!(btree(14, 13), TreeLink { up: 12, down0: -1, down1: -1, child_type: 1 });
        assert_eq!(btree(14, 12), TreeLink { up: 8, down0: 10, down1: 13, child_type: 1 });
        assert_eq!(btree(14, 0), TreeLink { up: -1, down0: -1, down1: 8, child_type: 0 });
        // 17 nodes: 16 is 0's only child and 8's parent.
        assert_eq!(btree(17, 16), TreeLink { up: 0, down0: 8, down1: -1, child_type: 1 });
        assert_eq!(btree(17, 0).down1, 16);
    }

    #[test]
    fn dtree_second_tree_matches_hand_tables() {
        for (n, ups) in DTREE_UP {
            for x in 0..n {
                assert_eq!(dtree(n, x).1.up, ups[x as usize], "n={n} node={x}");
            }
        }
    }

    #[test]
    fn dtree_is_a_spanning_tree_for_every_size() {
        for n in 1..=17 {
            let second: Vec<TreeLink> = (0..n).map(|x| dtree(n, x).1).collect();
            assert_eq!(second.iter().filter(|t| t.up == -1).count(), 1, "n={n} one root");
            for (x, t) in second.iter().enumerate() {
                for c in children(*t) {
                    assert_eq!(second[c as usize].up, x as i32, "n={n}: child {c} of {x} points back");
                }
                // Every node reaches the root.
                let (mut cur, mut steps) = (x as i32, 0);
                while second[cur as usize].up != -1 {
                    cur = second[cur as usize].up;
                    steps += 1;
                    assert!(steps <= n, "n={n}: cycle from {x}");
                }
            }
            if n > 1 {
                assert_ne!(dtree(n, 0).1.up, -1, "n={n}: node 0 is not the second root");
            }
        }
    }

    #[test]
    fn two_nodes_give_reference_text_trees() {
        // Reference text 000: `Tree 0 : -1 -> 0 -> 1/8/-1` and `Tree 12 : 8 -> 0 -> ...` for 2 nodes.
        let (t0, t1) = dtree(2, 0);
        assert_eq!((t0.up, t0.down1), (-1, 1));
        assert_eq!((t1.up, t1.child_type), (1, 1));
        assert_eq!(tree_depth(16, 2), 8);
        assert_eq!(tree_depth(8, 1), 7);
    }
}
