// The fake verbs (tests/unit/ib_verbs_fake.h) in place of libibverbs for one scope: communicators made in it with
// NCCL_NET=IB run chorus's IB net through the net proxy, as on a cluster, their queue pairs carried by one fake
// fabric. The fabric is memory of this process, so only thread ranks reach each other over it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transports/ib/ib_net.h"
#include "unit/ib_verbs_fake.h"

namespace chorus_test {

class FakeIbProcessNet {
 public:
  /// `ports` fake RoCE ports (HCAs mlx5_0, mlx5_1..., port 1 each) as the process's IB net: NICs of their own, or with
  /// `oneNic` the PCI functions of one NIC (0000:3b:00.0, 0000:3b:00.1...), as a dual-port ConnectX shows them.
  explicit FakeIbProcessNet(int ports = 1, bool oneNic = false) : fabric_(std::make_shared<chorus::FakeIbFabric>()) {
    std::vector<chorus::IbPortDesc> descs;
    for (int i = 0; i < ports; i++) {
      descs.push_back(chorus::fakeIbPort("mlx5_" + std::to_string(i), 1, i + 1));
      if (oneNic) descs.back().pciPath = "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00." + std::to_string(i);
    }
    auto verbs = std::make_unique<chorus::FakeIbVerbs>(fabric_, descs);
    auto net = std::make_unique<chorus::IbNet>(std::move(verbs));
    net_ = net.get();
    ok_ = net->discover(&why_) == ncclSuccess && net->ndev() == ports;
    if (ok_) previous_ = chorus::replaceIbProcessNet(std::move(net));
    if (!ok_ && why_.empty()) why_ = "the fake verbs offered no usable port";
  }
  /// Puts back the net it replaced (none: the next init opens libibverbs) and destroys the fake one; every
  /// communicator made in the scope must be gone.
  ~FakeIbProcessNet() {
    if (ok_) chorus::replaceIbProcessNet(std::move(previous_));
  }
  FakeIbProcessNet(const FakeIbProcessNet&) = delete;
  FakeIbProcessNet& operator=(const FakeIbProcessNet&) = delete;

  /// Whether the fake is in place; why() when not.
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  /// The fabric: what it carried, and the queue pairs and registrations alive.
  chorus::FakeIbFabric& fabric() { return *fabric_; }
  /// The fake net itself (its HCAs, its asynchronous events).
  chorus::IbNet& net() { return *net_; }

 private:
  std::shared_ptr<chorus::FakeIbFabric> fabric_;
  chorus::IbNet* net_ = nullptr;  // owned by the process's net slot while in place
  std::unique_ptr<chorus::IbNet> previous_;
  bool ok_ = false;
  std::string why_;
};

}  // namespace chorus_test
