#![doc = include_str!("cluster-control.md")]

pub mod cluster_formation {
    #![doc = include_str!("cluster-formation.md")]
}

pub mod dynamic_membership {
    #![doc = include_str!("dynamic-membership.md")]
}

pub mod joint_consensus {
    #![doc = include_str!("joint-consensus.md")]
}

pub mod node_lifecycle {
    #![doc = include_str!("node-lifecycle.md")]
}

pub mod monitoring_maintenance {
    #![doc = include_str!("monitoring-maintenance.md")]
}
