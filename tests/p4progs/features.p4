/* Exercises the language features the target supports beyond the tutorial
 * programs: ternary const entries with priorities, switch on action_run,
 * hit/miss, registers, hash, slices, concatenation, casts, saturating
 * arithmetic, select ranges and masks, verify, exit, setInvalid, enums,
 * control-level variables and the preprocessor. Frames carry an "op"
 * header after Ethernet (EtherType 0x88B5, local experimental). */
/* register<T, I> needs v1model of 2020-04-08 or later (p4c defaults to an older one). */
#define V1MODEL_VERSION 20200408
#include <core.p4>
#include <v1model.p4>

#define ETHERTYPE_OP 0x88B5
#ifndef NUM_SLOTS
#define NUM_SLOTS 16
#endif
#ifdef NOT_DEFINED
this line is skipped by the preprocessor
#endif

enum bit<8> Opcode {
    ADD = 0x01,
    SWAP = 0x02,
    CRC32 = 0x11,
    CSUM16 = 0x12,
    STRIP = 0xEE,
    DROP = 0xFF
}

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header op_t {
    bit<8>  opcode;
    bit<8>  flags;
    bit<16> a;
    bit<16> b;
    bit<32> result;
}

struct metadata {
    bit<1> matched_add;
    bit<32> slot;
}

struct headers {
    ethernet_t ethernet;
    op_t       op;
}

error { OpBadFlags }

parser MyParser(packet_in packet, out headers hdr, inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_OP: check_op;
            default: accept;
        }
    }
    state check_op {
        /* Peek at opcode and flags before extracting. */
        transition select(packet.lookahead<bit<16>>()[7:0]) {
            0 .. 0x3F: check_opcode;
            0x80 &&& 0x80: bad_flags;
            default: check_opcode;
        }
    }
    state check_opcode {
        /* Opcode 0xF0 is never valid: reject it before extracting anything. */
        transition select(packet.lookahead<op_t>().opcode) {
            0xF0: bad_flags;
            default: parse_op;
        }
    }
    state bad_flags {
        verify(false, error.OpBadFlags);
        transition accept;
    }
    state parse_op {
        packet.extract(hdr.op);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    register<bit<32>, bit<32>>(NUM_SLOTS) last_result;
    bit<32> previous;

    action do_add() {
        if ((hdr.op.flags & 1) == 1) {
            hdr.op.result = (bit<32>)(hdr.op.a |+| hdr.op.b);
        } else {
            hdr.op.result = (bit<32>)(hdr.op.a + hdr.op.b);
        }
    }
    action do_swap() {
        hdr.op.result = hdr.op.a ++ hdr.op.b;
        hdr.op.b = hdr.op.a[7:0] ++ hdr.op.a[15:8];
    }
    action do_crc32() {
        hash(hdr.op.result, HashAlgorithm.crc32, 32w0, { hdr.op.a, hdr.op.b }, 33w0x100000000);
    }
    action do_csum16(bit<32> offset) {
        bit<16> sum;
        hash(sum, HashAlgorithm.csum16, 16w0, { hdr.op.a, hdr.op.b }, 17w0x10000);
        hdr.op.result = offset + (bit<32>)sum;
    }
    table ops {
        key = { hdr.op.opcode: ternary; }
        actions = { do_add; do_swap; do_crc32; do_csum16; NoAction; }
        const entries = {
            0x01 &&& 0xFF: do_add();
            0x02: do_swap();
            0x11: do_crc32();
            0x12: do_csum16(0x10000);
            0x10 &&& 0xF0: do_csum16(0);
        }
        default_action = NoAction();
    }
    /* Slots the control plane has marked; a hit sets flag bit 6. */
    table marked_slots {
        key = { meta.slot: exact; }
        actions = { NoAction; }
    }

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            mark_to_drop(standard_metadata);
            exit;
        }
        standard_metadata.egress_spec = standard_metadata.ingress_port ^ 1;
        if (!hdr.op.isValid()) {
            exit;
        }
        if (hdr.op.opcode == Opcode.DROP) {
            mark_to_drop(standard_metadata);
            exit;
        }
        if (hdr.op.opcode == (bit<8>)Opcode.STRIP) {
            hdr.op.setInvalid();
            hdr.ethernet.etherType = 0x0800;
            exit;
        }
        switch (ops.apply().action_run) {
            do_add: {
                meta.matched_add = 1;
            }
            do_swap:
            do_crc32: {
                meta.matched_add = 0;
            }
            default: { }
        }
        meta.slot = (bit<32>)hdr.op.a[3:0];
        last_result.read(previous, meta.slot);
        last_result.write(meta.slot, hdr.op.result);
        hdr.ethernet.srcAddr = meta.matched_add == 1 ? 48w1 : (bit<48>)previous;
        hdr.op.flags = hdr.op.flags | (marked_slots.apply().hit ? 8w0x40 : 8w0);
    }
}

control MyEgress(inout headers hdr, inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
