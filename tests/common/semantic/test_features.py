"""The layout statistics among the semantic head's features (line lengths, format specifiers, digits, ...)."""
from stages.common.semantic.features import layout_features


def test_layout_features_see_format_specifiers():
    messages = "无法打开文件 \"%s\": %s\n用法：%s [选项]... 文件...\n在第 %d 行缺少记录"
    prose = "这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。"
    assert layout_features(messages)[5] == 1.0 and layout_features(prose)[5] == 0.0
