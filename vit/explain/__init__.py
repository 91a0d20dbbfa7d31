"""What drove an answer, in numbers (torch in, numpy out); vit/pictures/ draws them.

- attention.py: every head's attention, [CLS]'s view of the patches, attention rollout.
- attribution.py: class-specific relevance, occlusion, switching heads off, the deletion test.
- mechanism.py: one token's trip through one head, step by step; the ViT paper's Figure 7 numbers.
- ood.py: is the input one of the model's classes at all ("not a digit")?
- calibration.py: temperature scaling, ECE, and the rule for refusing an unsure answer.
"""
